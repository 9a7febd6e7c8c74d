"""safemon.faults"""
