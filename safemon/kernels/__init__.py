"""safemon.kernels"""
