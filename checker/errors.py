"""The two ways a check can fail, mapped to the documented exit codes."""


class Malformed(Exception):
    """Input is not a well-formed certificate / model file, is unsupported, or
    exceeds a resource limit.  Exit code 2."""

    exit_code = 2


class Rejected(Exception):
    """The certificate is well formed but wrong: a recorded value does not
    enclose what the checker computes, a rule's side condition fails, or it
    proves less than required.  Exit code 1."""

    exit_code = 1
