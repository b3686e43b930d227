"""The three kinds of failure the user contract distinguishes, each with its exit code.

UserError (2): bad input - recipe, flags, data, paths. One line naming the field/file and what is expected.
Unsupported (3): the feature is not available on this device; the message says what to use instead.
SwiftboxError (1): anything else we raise on purpose (e.g. a distributed run that failed).
"""


class SwiftboxError(Exception):
    exit_code = 1


class UserError(SwiftboxError):
    exit_code = 2


class Unsupported(SwiftboxError):
    exit_code = 3
