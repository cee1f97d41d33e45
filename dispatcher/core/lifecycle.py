"""Where a conversation and a dispatch attempt end: the end states more than one layer decides
by (the domain, retention's SQL, the views), each defined once, here, below all of them."""

# A conversation in one of these never changes again: no event of ``conversations.TRANSITIONS``
# leaves it (a test checks), so retention may delete it once it is old.
TERMINAL_CONVERSATION_STATES = ("completed", "cancelled", "expired")

# The attempt outcomes after which the sender was told the attempt failed, and a result that
# still arrives is news (``late_result_ids``). budget_exceeded: no evidence, and the CLI said it
# stopped at its cost cap (its own kind of stop, told apart from a generic failure).
FAILURE_OUTCOMES = ("failed", "timeout", "crashed", "budget_exceeded")
