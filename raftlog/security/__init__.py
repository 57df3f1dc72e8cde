"""Who a connection is (principal), how it proved it (TLS, SASL) and what it may do (ACLs)."""
