"""Fault injection into the protected kernel: the injection build and its launcher.

`launch` is the only module that knows the `Injection` struct of the injection build
(`SAFEMON_INJECT=1`, mmm.cu), its targets, scopes and verdict bits. The campaigns that use it,
and the evidence they produce, live in `safemon.evidence`; channel-level fault injection
(bit flips, crashes, hangs of a running channel) lives in `safemon.channels.faults`.
"""
