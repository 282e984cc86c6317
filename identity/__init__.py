"""Who a person or a program is, as the company's identity provider says: sign-in to the admin
through OIDC or SAML, the mapping from the provider's claims to Canon's tenant membership, roles
and access groups (re-applied at every sign-in and re-check), sessions ended when the provider
says so, and OAuth 2.0 access tokens read as the grants an API key carries.

A floor above `kb` (whose memberships and role groups it sets) and below `retrieval` (whose
`principals` turns a token's grants into a Principal)."""
