"""Typed refusals shared by every layer.

A ``BridgeError`` carries a stable machine ``code`` (snake_case, part of the public
contract) and a message saying what was wrong and what to do. Domain functions raise
it *before* writing anything, or inside a transaction that is then rolled back, so a
refusal never leaves a partial write behind.
"""


class BridgeError(Exception):
    def __init__(self, code: str, message: str, **details: object) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class StateChangedError(BridgeError):
    """A refusal that nonetheless records a state transition the rules demand.

    Two conversation rules refuse a send *and* move the conversation: touching an
    expired conversation settles it as ``expired``, and a send past the turn budget
    moves it to ``needs_human``. The transaction commits that move, then raises.
    """
