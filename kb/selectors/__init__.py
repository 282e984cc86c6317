"""Reads of knowledge-base state, one module per subject: `documents`, `builds` and
`index_versions`. Who may read what is `kb.access`, a floor below."""
