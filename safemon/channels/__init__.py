"""safemon.channels"""
