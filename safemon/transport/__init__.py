"""safemon.transport"""
