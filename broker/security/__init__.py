"""Security: TLS material, authentication providers, permissions and the ACL store."""
