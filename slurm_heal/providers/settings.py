"""What a provider's settings model is made of, by the name a third party's provider
imports it (docs/providers.md "Third-party providers"): it lives in
`slurm_heal.providerconf`, below the config, beside the built-in types' models, so that
the policy loader reads a ``[provider]`` table as the provider's construction does
(issue 33)."""

from __future__ import annotations

from slurm_heal.providerconf import (
    DOCS,
    SECTION,
    Count,
    Duration,
    Flag,
    LongTimeout,
    Port,
    ProviderSettings,
    RequiredText,
    RequiredUrl,
    S,
    StrTable,
    Text,
    Timeout,
    Url,
    Verify,
    actions_of,
    read_provider_section,
    supported_action,
    words_of,
)

__all__ = ["DOCS", "SECTION", "Count", "Duration", "Flag", "LongTimeout", "Port",
           "ProviderSettings", "RequiredText", "RequiredUrl", "S", "StrTable", "Text",
           "Timeout", "Url", "Verify", "actions_of", "read_provider_section",
           "supported_action", "words_of"]
