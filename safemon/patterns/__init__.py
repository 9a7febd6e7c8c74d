"""safemon.patterns"""
