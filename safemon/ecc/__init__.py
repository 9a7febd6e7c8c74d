"""safemon.ecc"""
