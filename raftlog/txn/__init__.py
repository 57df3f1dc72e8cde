"""Transactions (KIP-98): the transaction coordinator and its `__transaction_state` records."""
