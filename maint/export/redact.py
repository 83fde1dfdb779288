"""--redact: mask secrets in exported text.

Detection is Yelp's detect-secrets (maintained, plugin per credential type:
AWS, GitHub, GitLab, Slack, Stripe, JWT, private keys, basic-auth URLs,
password-style assignments ...), with its high-entropy plugins left out
because they flag ordinary hex ids, hashes and UUIDs. A few formats it does
not know (OpenAI/Anthropic/Hugging Face keys, bearer headers, whole PEM
blocks) are added as patterns. A detector often reports only part of a token
(a prefix, a JWT without its signature), so the whole token around each hit
is masked.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

MASK = "[REDACTED]"
PLUGINS = ("AWSKeyDetector", "ArtifactoryDetector", "AzureStorageKeyDetector", "BasicAuthDetector",
           "CloudantDetector", "DiscordBotTokenDetector", "GitHubTokenDetector", "GitLabTokenDetector",
           "IbmCloudIamDetector", "JwtTokenDetector", "KeywordDetector", "MailchimpDetector", "NpmDetector",
           "OpenAIDetector", "PrivateKeyDetector", "PypiTokenDetector", "SendGridDetector", "SlackDetector",
           "SoftlayerDetector", "SquareOAuthDetector", "StripeDetector", "TelegramBotTokenDetector",
           "TwilioKeyDetector")
EXTRA = [
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S),
    re.compile(r"\b(?:sk|rk|pk)-(?:proj-|ant-(?:api\d{2}-)?)?[A-Za-z0-9_\-]{20,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),
    re.compile(r"(?i)(?<=\bbearer )[A-Za-z0-9._~+/=\-]{16,}"),
    re.compile(r"(?i)(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"),
]
TOKEN_CHARS = r"A-Za-z0-9_\-.+/=~"


@lru_cache(maxsize=1)
def _settings() -> dict:
    return {"plugins_used": [{"name": name} for name in PLUGINS]}


def _spread(line: str, value: str) -> list[tuple[int, int]]:
    """Every occurrence of *value* in *line*, widened to the whole token around it."""
    spans = []
    start = line.find(value)
    while start >= 0 and value:
        lo, hi = start, start + len(value)
        while lo > 0 and re.match(f"[{TOKEN_CHARS}]", line[lo - 1]):
            lo -= 1
        while hi < len(line) and re.match(f"[{TOKEN_CHARS}]", line[hi]):
            hi += 1
        spans.append((lo, hi))
        start = line.find(value, start + 1)
    return spans


def redact_text(text: str) -> str:
    if not text:
        return text
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import transient_settings

    for pattern in EXTRA:
        text = pattern.sub(MASK, text)
    out = []
    with transient_settings(_settings()):
        for line in text.split("\n"):
            spans = []
            for secret in scan_line(line):
                if secret.secret_value and secret.secret_value != MASK:
                    spans += _spread(line, secret.secret_value)
            for lo, hi in sorted(spans, reverse=True):
                if MASK in line[lo:hi] and len(line[lo:hi]) == len(MASK):
                    continue
                line = line[:lo] + MASK + line[hi:]
            out.append(line)
    return "\n".join(out)


def redact_value(value: Any) -> Any:
    """Strings are redacted; lists and dicts recursively; everything else passes through."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return [redact_value(v) for v in value]
    if isinstance(value, dict):
        return {k: redact_value(v) for k, v in value.items()}
    return value


TEXT_FIELDS = ("content", "tool_calls", "reasoning", "reasoning_content", "api_content", "system_prompt",
               "reasoning_details", "codex_reasoning_items", "codex_message_items", "title")


def redact_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (redact_text(v) if k in TEXT_FIELDS and isinstance(v, str) else v) for k, v in row.items()}
