"""The bridge domain: messages, claims, conversations, broadcast, presence and the inbox rules,
as plain functions over a store connection.
It imports only the core and the store."""
