"""Tenants at the regional balancer: who sent a request (API keys, JWTs), what each may take
(quotas shared through the state store), and what each used (usage accounting)."""
