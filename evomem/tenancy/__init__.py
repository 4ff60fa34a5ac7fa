"""What a fleet manages per tenant at run time: settings a namespace overrides, and API tokens."""

from evomem.tenancy.overrides import OVERRIDABLE, NamespaceOverrides, NamespaceSettings, SettingsResolver
from evomem.tenancy.tokens import TokenRecord, TokenStore

__all__ = [
    "OVERRIDABLE",
    "NamespaceOverrides",
    "NamespaceSettings",
    "SettingsResolver",
    "TokenRecord",
    "TokenStore",
]
