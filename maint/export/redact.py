"""--redact: mask credentials in exported text, keeping ids, hashes and the text's structure intact.

Best-effort by nature: a secret with no documented shape and no telling name beside it cannot be
told from an id. Three kinds of evidence are used, each only where a cheap literal check says it
can apply, so text without any of them costs one lower-casing, a dozen substring tests and one
byte translation:

* **shape**: credentials with a documented prefix or structure (``sk-``, ``ghp_``, ``AKIA``, JWTs,
  Slack/Discord webhooks ...), found inside runs of 20 or more token characters. Prefixes that
  ordinary identifiers also use (``sk_``, ``am_``, ``fc-`` ...) need a random-looking body.
* **name**: ``NAME=value``, ``name: value``, ``"name": "value"``, ``--name value``, ``?name=value``,
  HTTP headers, where the name says secret (``*_KEY``, ``*_TOKEN``, ``PASSWORD``, ``X-Api-Key`` ...)
  and its last part is not a harmless qualifier (``token_count``, ``KEY_PATH``, ``MAX_TOKENS``).
* **place**: URL userinfo (``scheme://user:PASSWORD@host``), the body of PEM/OpenSSH private key
  blocks, ``curl -u user:PASS``, ``.netrc`` passwords, E.164 phone numbers (as Hermes does).

Only the secret itself becomes ``[REDACTED]``: names, schemes, hosts and the key block's BEGIN/END
lines stay. Every mask lies inside a quoted value or a token, never across a quote or backslash, so
JSON text stays JSON.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from maint import json_text

MASK = "[REDACTED]"

# -- shapes ---------------------------------------------------------------------------------------
# (family, pattern); each pattern starts where the token starts.
_FAMILIES: list[tuple[str, str]] = [
    # AI providers
    ("openai/anthropic/openrouter/deepseek", r"sk-[A-Za-z0-9_\-]{16,}"),
    ("groq", r"gsk_[A-Za-z0-9]{20,}"),
    ("perplexity", r"pplx-[A-Za-z0-9]{20,}"),
    ("together", r"tgp_v1_[A-Za-z0-9_\-]{20,}"),
    ("fireworks", r"f(?:w|pk)[_\-][A-Za-z0-9]{20,}"),
    ("xai", r"xai-[A-Za-z0-9]{20,}"),
    ("huggingface", r"(?:hf_|api_org_)[A-Za-z0-9]{20,}"),
    ("tailscale", r"tskey-(?:auth|api|client|scim|webhook)-[A-Za-z0-9]{6,}-[A-Za-z0-9]{16,}"),
    ("replicate", r"r8_[A-Za-z0-9]{20,}"),
    ("langsmith", r"lsv2_(?:pt|sk)_[A-Za-z0-9_]{20,}"),
    ("pinecone", r"pcsk_[A-Za-z0-9_]{20,}"),
    ("tavily", r"tvly-(?:dev-|prod-)?[A-Za-z0-9]{16,}"),
    ("hermes-tools", r"(?:fal_|fc-|bb_live_|am_|exa_|syt_|retaindb_|hsk-|mem0_|brv_)[A-Za-z0-9_\-]{10,}"),
    ("elevenlabs", r"sk_[A-Za-z0-9_]{16,}"),
    ("fernet/codex", r"gAAAA[A-Za-z0-9_=\-]{20,}"),
    # Google
    ("google-api-key", r"AIza[A-Za-z0-9_\-]{30,}"),
    ("google-oauth-secret", r"GOCSPX-[A-Za-z0-9_\-]{20,}"),
    ("google-oauth-token", r"ya29\.[A-Za-z0-9_\-]{20,}"),
    ("google-refresh-token", r"1//0[A-Za-z0-9_\-]{30,}"),
    # clouds and platforms
    ("aws-access-key-id", r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}(?![A-Za-z0-9])"),
    # the secret beside its key id, as in credentials.csv or "AKIA…:secret"
    # (in the next cell of a table too: aws … --output table, "| AKIA… | secret |")
    ("aws-secret-beside-id", r"(?:(?<=(?:AKIA|ASIA)[A-Z0-9]{16}[,:| \t])|(?<=(?:AKIA|ASIA)[A-Z0-9]{16}[ \t]\|[ \t])"
                             r"|(?<=(?:AKIA|ASIA)[A-Z0-9]{16}\|[ \t]{2})|(?<=(?:AKIA|ASIA)[A-Z0-9]{16}[ \t]\|[ \t]{2}))"
                             r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"),
    ("azure-ad-client-secret", r"[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}"),
    ("github", r"gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{50,}"),
    ("gitlab", r"gl(?:pat|dt|rtr|rt|ptt|cbt|ft|soat|oas|imt|agent|ffct|wt)-[A-Za-z0-9_\-]{16,}(?:\.[A-Za-z0-9_\-]+)*"
               r"|GR1348941[A-Za-z0-9_\-]{20}"),
    ("atlassian/bitbucket", r"AT(?:ATT|CTT|OAT)3[A-Za-z0-9_=\-]{50,}|ATBB[A-Za-z0-9_=.\-]{28,}"),
    ("npm", r"npm_[A-Za-z0-9]{30,}"),
    ("pypi", r"pypi-[A-Za-z0-9_\-]{40,}"),
    ("rubygems", r"rubygems_[a-f0-9]{40,}"),
    ("docker-hub", r"dckr_(?:pat|oat)_[A-Za-z0-9_\-]{20,}"),
    ("digitalocean", r"do[opr]_v1_[a-f0-9]{40,}"),
    ("heroku", r"HRKU-[A-Za-z0-9_\-]{40,}"),
    ("cloudflare-origin-ca", r"v1\.0-[a-f0-9]{24}-[a-f0-9]{100,}"),
    ("vercel", r"vc[piakr]_[A-Za-z0-9]{24,}"),
    ("netlify", r"nf[pcoa]_[A-Za-z0-9]{30,}"),
    ("shopify", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),
    ("stripe", r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,}|whsec_[A-Za-z0-9]{24,}"),  # pk_…: public by design
    ("twilio", r"(?:SK[0-9a-fA-F]{32}|AC[0-9a-f]{32})(?![A-Za-z0-9])"),
    ("sendgrid", r"SG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{30,}"),
    ("mailgun", r"key-[0-9a-f]{32}|[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8}(?![A-Za-z0-9])"),
    ("mailchimp", r"[0-9a-f]{32}-us\d{1,2}(?![A-Za-z0-9])"),
    ("slack", r"xox[abcdeoprs]-[A-Za-z0-9\-]{10,}|xoxe\.xox[bp]-\d-[A-Za-z0-9\-]{20,}|xapp-\d-[A-Za-z0-9\-]{10,}"),
    ("discord-bot", r"[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,40}"),
    ("telegram-bot", r"(?:bot)?\d{8,12}:[A-Za-z0-9_\-]{30,}"),
    ("linear", r"lin_(?:api|oauth)_[A-Za-z0-9]{32,}"),
    ("notion", r"secret_[A-Za-z0-9]{40,}|ntn_[A-Za-z0-9]{30,}"),
    ("sentry-token", r"sntry[su]_[A-Za-z0-9+/=_]{40,}"),
    ("jwt", r"eyJ[A-Za-z0-9_=\-]{10,}(?:\.[A-Za-z0-9_=\-]{2,}|\.(?=\.)){0,4}"),  # a JWE has five parts
    ("postman", r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}"),
    ("terraform", r"[a-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=\-]{60,}"),
    ("vault", r"hv[sbr]\.[A-Za-z0-9_\-]{24,}|s\.[A-Za-z0-9]{24}(?![A-Za-z0-9])"),
    ("1password", r"ops_eyJ[A-Za-z0-9_=\-]{50,}"),
    ("grafana", r"gl(?:c|sa)_[A-Za-z0-9_=\-]{30,}"),
    ("newrelic", r"NRAK-[A-Z0-9]{27}"),
    ("planetscale", r"pscale_(?:tkn|pw|oauth)_[A-Za-z0-9_.\-]{30,}"),
    ("supabase", r"sbp_[a-f0-9]{40}"),
    ("doppler", r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}"),
    ("age", r"AGE-SECRET-KEY-1[02-9AC-HJ-NP-Zac-hj-np-z]{58}"),  # not age1…: a public recipient
    ("figma", r"figd_[A-Za-z0-9_\-]{40,}"),
    ("square", r"sq0(?:atp|csp|idp)-[A-Za-z0-9_\-]{22,}|EAAA[A-Za-z0-9_\-]{60,}"),
    ("databricks", r"dapi[a-f0-9]{32}(?:-\d)?"),
    ("artifactory", r"AKCp[A-Za-z0-9]{60,}"),
    ("pulumi", r"pul-[a-f0-9]{40}"),
    ("prefect", r"pnu_[A-Za-z0-9]{36}"),
    ("contentful", r"CFPAT-[A-Za-z0-9_\-]{40,}"),
    ("openai-session", r"sess-[A-Za-z0-9]{40}"),
    ("firebase-fcm", r"AAAA[A-Za-z0-9_\-]{7}:[A-Za-z0-9_\-]{100,}"),
    ("dropbox", r"sl\.[A-Za-z0-9_\-]{100,}"),
    ("launchdarkly", r"(?:sdk|mob)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?![A-Za-z0-9])"),
    ("resend", r"re_[A-Za-z0-9]{8}_[A-Za-z0-9]{24}(?![A-Za-z0-9])"),
    ("nuget", r"oy2[a-z0-9]{43}(?![A-Za-z0-9])"),
    # more families from gitleaks's public rule set (config/gitleaks.toml)
    ("1password-secret-key", r"A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})"
                             r"-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}"),
    ("adobe", r"p8e-[A-Za-z0-9]{32}"),
    ("airtable", r"pat[A-Za-z0-9]{14}\.[a-f0-9]{64}"),
    ("alibaba", r"LTAI[A-Za-z0-9]{20}"),
    ("artifactory-reference", r"cmVmd[A-Za-z0-9]{59}"),
    ("aws-bedrock", r"ABSK[A-Za-z0-9+/]{109,269}={0,2}"),
    ("clickhouse", r"4b1d[A-Za-z0-9]{38}"),
    ("clojars", r"CLOJARS_[A-Za-z0-9]{60}"),
    ("defined-networking", r"dnkey-[A-Za-z0-9=_\-]{26}-[A-Za-z0-9=_\-]{52}"),
    ("duffel", r"duffel_(?:test|live)_[A-Za-z0-9_\-=]{43}"),
    ("dynatrace", r"dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}"),
    ("easypost", r"EZ[AT]K[A-Za-z0-9]{54}"),
    ("facebook-page", r"EAA[MC][A-Za-z0-9]{100,}"),
    ("flutterwave", r"FLW(?:SECK|PUBK)_TEST-[a-hA-H0-9]{12,32}(?:-X)?"),
    ("flyio", r"fo1_[\w\-]{43}|fm1[ar]_[A-Za-z0-9+/]{100,}={0,3}|fm2_[A-Za-z0-9+/]{100,}={0,3}"),
    ("frameio", r"fio-u-[A-Za-z0-9_=\-]{64}"),
    ("harness", r"(?:pat|sat)\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}"),
    ("infracost", r"ico-[A-Za-z0-9]{32}"),
    ("intra42", r"s-s4t2(?:ud|af)-[a-f0-9]{64}"),
    ("maxmind", r"[A-Za-z0-9]{6}_[A-Za-z0-9]{29}_mmk"),
    ("octopus-deploy", r"API-[A-Z0-9]{26}"),
    ("openshift", r"sha256~[\w\-]{43}"),
    ("readme", r"rdme_[a-z0-9]{70}"),
    ("scalingo", r"tk-us-[\w\-]{48}"),
    ("sendinblue", r"xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}"),
    ("settlemint", r"sm_[aps]at_[A-Za-z0-9]{16}"),
    ("shippo", r"shippo_(?:live|test)_[a-fA-F0-9]{40}"),
    ("sourcegraph", r"sgp_(?:[a-fA-F0-9]{16}_|local_)?[a-fA-F0-9]{40}"),
    ("typeform", r"tfp_[A-Za-z0-9_.=\-]{59}"),
    ("yandex", r"AQVN[A-Za-z0-9_\-]{35,38}|t1\.[A-Za-z0-9_\-]+={0,2}\.[A-Za-z0-9_\-]{86}"),
    ("newrelic-more", r"NRJS-[a-f0-9]{19}|NRII-[A-Za-z0-9_\-]{32}"),
    ("sonar", r"sq[upa]_[a-f0-9]{40}"),
    ("twitter-bearer", r"A{22}[A-Za-z0-9%]{80,100}"),
    ("gitlab-session", r"_gitlab_session=[0-9a-z]{32}"),
    # round 10 (redact-hostile-3): prefixed families found bare in prose, and gitleaks's rules of the same kind
    ("nvidia", r"nvapi-[A-Za-z0-9_\-]{40,}"),
    ("cerebras", r"csk-[a-z0-9]{40,}"),
    ("brave", r"BSA[A-Za-z0-9_\-]{25,32}(?![A-Za-z0-9_\-])"),
    ("e2b", r"e2b_[a-f0-9]{40}"),
    ("honeycomb", r"hc[ax][ilm]k_[a-z0-9]{50,}"),
    ("hubspot", r"pat-(?:na|eu|ap)\d-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
    ("circleci", r"CCIP(?:AT|RJ)_[A-Za-z0-9]{16,}_[a-f0-9]{40}"),
    ("supabase-secret", r"sb_secret_[A-Za-z0-9_\-]{20,}"),
    ("okta", r"00[A-Za-z0-9_\-]{40}(?![A-Za-z0-9_\-])"),
    ("asana", r"[012]/\d{13,17}/\d{13,17}:[a-f0-9]{32}"),
    ("azure-devops", r"[A-Za-z0-9]{76}AZDO[A-Za-z0-9]{4}(?![A-Za-z0-9])"),
    ("gocardless/lob", r"(?:live|sandbox)_[A-Za-z0-9_=\-]{35,40}(?![A-Za-z0-9_=\-])|test_[a-f0-9]{35}(?![a-f0-9])"),
    ("twitch", r"oauth:[a-z0-9]{30}(?![A-Za-z0-9])"),
    ("axiom", r"xa[ap]t-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
    ("buildkite", r"bk(?:ua|at)_[a-f0-9]{40}"),
    ("render", r"rnd_[A-Za-z0-9]{32,}"),
    ("neon", r"napi_[a-z0-9]{60,}"),
    ("modal", r"as-[A-Za-z0-9]{22}(?![A-Za-z0-9])"),
    ("clickup", r"pk_\d{6,10}_[A-Z0-9]{32}"),
    ("plaid", r"access-(?:sandbox|development|production)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}"
              r"-[0-9a-f]{12}"),
    ("bitbucket-dc", r"BBDC-[A-Za-z0-9+/]{40,}"),
    ("docker-swarm", r"SWMTKN-1-[a-z0-9]{50}-[a-z0-9]{25}"),
    ("paseto-local", r"v[1-4]\.local\.[A-Za-z0-9_\-]{40,}"),
    ("infisical", r"st\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.[a-f0-9]{32}\.[a-f0-9]{32}"),
    ("adafruit", r"aio_[A-Za-z0-9]{28}(?![A-Za-z0-9])"),
    ("voyage", r"pa-[A-Za-z0-9_\-]{40,}"),
    ("jina", r"jina_[A-Za-z0-9]{40,}"),
    ("pagerduty", r"u\+[A-Za-z0-9_\-]{18}(?![A-Za-z0-9_\-])"),
    ("lnd-macaroon", r"0201036c6e64[0-9a-f]{60,}"),
    ("posthog-personal", r"phx_[A-Za-z0-9]{43}"),
    ("deno-deploy", r"dd[pw]_[A-Za-z0-9]{36}"),
    # webhooks: the secret is the path; the host stays readable
    ("slack-webhook", r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{20,}"),
    ("discord-webhook", r"discord(?:app)?\.com/api/webhooks/\d{16,20}/[A-Za-z0-9_\-]{40,}"),
    # webhooks whose route ends in the secret (Zapier's account and hook ids, Make's and IFTTT's keys): it alone is
    # masked
    ("zapier-webhook", r"(?<=hooks\.zapier\.com/hooks/catch/)\d{3,12}/[A-Za-z0-9]{5,12}(?![A-Za-z0-9])"),
    ("make-webhook", r"(?:(?<=\.make\.com/)|(?<=\.integromat\.com/))[a-z0-9]{32}(?![A-Za-z0-9])"),
    ("ifttt-webhook", r"(?<=/with/key/)[A-Za-z0-9_\-]{20,}"),
    # round 11 (redact-hostile-4): token shapes (crates.io, Paddle, Klaviyo's private key (not Stripe's publishable
    # pk_live_), Braintree, DingTalk's signing secret, Ably's app.key:secret, a minisign secret key, an extended
    # private key, a Nostr nsec); webhook routes whose path is the secret (Mattermost, Rocket.Chat, Feishu/Lark)
    ("crates-io", r"cio[A-Za-z0-9]{32}(?![A-Za-z0-9])"),
    ("paddle", r"pdl_(?:live|sdbx)_apikey_[A-Za-z0-9_]{20,}"),
    ("klaviyo-private", r"pk_[a-f0-9]{34}(?![A-Za-z0-9])"),
    ("dingtalk-sign", r"SEC[a-f0-9]{64}(?![A-Za-z0-9])"),
    ("ably", r"[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{6}:[A-Za-z0-9_\-]{40,}"),
    ("minisign-secret", r"RWRTY0Iy[A-Za-z0-9+/]{100,}={0,2}"),
    ("bip32-private", r"[xtyzuv]prv[1-9A-HJ-NP-Za-km-z]{100,112}"),
    ("nostr-nsec", r"nsec1[02-9ac-hj-np-z]{58}"),
    ("mattermost-webhook", r"(?<=/hooks/)[a-z0-9]{26}(?![A-Za-z0-9])"),
    ("rocketchat-webhook", r"(?<=/hooks/)[A-Za-z0-9]{17,24}/[A-Za-z0-9]{40,}"),
    ("feishu-webhook", r"(?<=/bot/v2/hook/)[0-9a-f\-]{32,36}"),
]
# One alternation behind one token-boundary check, without groups (each group costs in every attempt).
_SHAPES = re.compile(r"(?<![A-Za-z0-9_\-])(?:" + "|".join(p for _, p in _FAMILIES) + ")")
# Prefixes that identifiers also use: the body after them must look random.
_LOOSE_PREFIXES = ("sk_", "fw", "fpk_", "tvly-", "fal_", "fc-", "bb_live_", "am_", "exa_", "syt_", "retaindb_",
                   "hsk-", "mem0_", "brv_", "gAAAA", "vc", "nf", "xox", "xapp-", "eyJ",
                   # round 10: prefixes that words and identifiers also start with (as-is, live_stream_…)
                   "BSA", "00", "live_", "sandbox_", "test_", "rnd_", "as-", "pa-", "u+", "aio_", "csk-",
                   "cio", "pk_")  # round 11
_RUN_CHARS = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.+/=~:")
# Token characters become "a", everything else (UTF-8 lead and continuation bytes too) a space:
# a shape can only be present where 20 of them stand in a row (documented formats are all longer).
_RUN_TABLE = bytes(ord("a") if b in _RUN_CHARS else ord(" ") for b in range(256))
_RUN_20 = b"a" * 20
_RUN = re.compile(_RUN_20 + b"*")
_HEX = b"0123456789abcdef-"
_PLAIN = _HEX + b":.TZ+"
_HEX_SHAPES = re.compile(rb"fc-[0-9a-f]{32}|[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8}|0201036c6e64")
_ID_RUN = re.compile(rb"(?:call|toolu|msg|chatcmpl|run|req|resp|asst|thread|batch)[_\-][A-Za-z0-9_\-]+")


# The word password (secret, key) in other languages (the gate and _LOCAL_PASSWORD read it).
_LOCAL_WORDS = (
    "パスワード|暗証番号|秘密鍵|合言葉|密码|密碼|口令|密钥|密鑰|秘钥|비밀번호|패스워드|암호"
    "|passwort|kennwort|zugangsdaten|senha|palavra-passe|contraseña|contrasena|clave|mot de passe|mdp"
    "|пароль|пароля|паролем|парол|wachtwoord|lösenord|lösenordet|hasło|hasła|hasło|heslo|hesla|jelszó|jelszava|jelszo"
    "|salasana|adgangskode|passord|şifre|şifresi|parola|parolası|parolasi|kata sandi|kata laluan|sandi"
    "|κωδικός|κωδικός πρόσβασης|συνθηματικό|סיסמה|סיסמא|كلمة المرور|كلمة السر|كلمة سر|पासवर्ड|कूटशब्द"
    "|mật khẩu|mat khau"
    # round 8: Romanian, Thai, Persian, Bengali, Swahili, Catalan, Croatian, Slovene, Lithuanian, Estonian; token
    # in Japanese, Chinese and Korean
    "|parolă|parolei|รหัสผ่าน|رمز عبور|گذرواژه|পাসওয়ার্ড|nenosiri|nywila|contrasenya|lozinka|lozinku|zaporka"
    "|geslo|slaptažodis|slaptažodį|parool|parooli|salasõna|apiトークン|apiキー|トークン|令牌|토큰"
    # round 12: key in Korean (API 키, 비밀 키 …; 키 alone is also a height)
    "|api 키|api키|비밀 키|비밀키|시크릿 키|시크릿키|액세스 키|액세스키|인증 키|인증키"
    "|password|passphrase|passwd")

# A type written between a name and "=" (Go's var dbPassword string = "…", Bicep's param x string = '…')
_TYPE_WORD = (r"(?:(?i:as)[ \t]+)?(?:\[\])?(?:string|securestring|str|&str|byte|bytes|text|varchar(?:\(\d{1,5}\))?"
              r"|char\*?|\[\]byte)")

# -- the gate ------------------------------------------------------------------------------------
# One automaton over the whole text, compiled by RE2 (linear time, a DFA): it matches wherever any
# rule below could (a keyword with a separator after it, a shape's prefix, a place's marker, an
# escape), so a text it does not match is returned as it is without running them. It must stay a
# superset of the rules: the corpus tests run through it.
_GATE_KW = ("(?i:key|token|pass|secret|auth|sig|cred|pw|dsn|cookie|jwt|bearer|mnemonic|psk|sessid|jsession"
            "|salt|encrypt|sessionid)")  # round 11: WordPress's *_SALT, Consul's encrypt, Django's sessionid
# Space beside a separator: Unicode spaces (the rules see them as " "), and a tab or a Unicode space
# escaped in JSON text (the rules see the decoded value; the gate sees the raw text, escapes and all).
_GATE_SP = (r"(?:[ \t\x{a0}\x{1680}\x{2000}-\x{200a}\x{202f}\x{205f}\x{3000}]|\\+t"
            r"|\\+u(?i:00a0|1680|200[0-9a]|202f|205f|3000))")
_GATE_NAMECHARS = r"[^\s\"'`\]=:,(<>\\]"
# The name after its keyword: anything, except a name that ends in "tokens" (MAX_TOKENS, max_tokens:
# no rule takes a plural, and code is full of them), unless another keyword comes first.
_GATE_TAIL = r"(?:(?i:[^s\s\"'`\]=:,(<>\\])" + _GATE_NAMECHARS + "*|(?i:s)" + _GATE_NAMECHARS + "+)?"
# What follows "NAME =": a line end (a YAML block) or a value that is not os./self. (code reading
# a setting: the rules skip os.environ[…], self.token …)
_GATE_VALUE = (_GATE_SP + r"*(?:[\r\n]|$|(?i:[^os\s]|o$|o[^s]|os$|os[^.]|s$|s[^e]|se$|se[^l]|sel$|sel[^f]"
               r"|self$|self[^.]))")
_GATE_NAME = (_GATE_KW.replace("token|", "") + _GATE_NAMECHARS + "*|(?i:token)" + _GATE_TAIL)
_GATE_NAME = ("(?:" + _GATE_NAME + ")(?:"
              # NAME=, NAME:, "NAME"] =, NAME <-
              r"(?:\\*[\"'`])?\]?" + _GATE_SP + r"*(?::|[?+]?=|<-|<<<|\x{ff1a}|\x{ff1d}|(?:\|\||\?\?|&&)=)"
             + _GATE_VALUE +
              r"|`?" + _GATE_SP + r"*\|" + _GATE_SP + r"*[^\s|]+" + _GATE_SP + r"*\|"  # | NAME | value |, | `N` |
              r"|\\*[\"']\]?" + _GATE_SP + r"*,"  # "NAME", value
              r"|\\*[\"'](?:[ \t\r\n]|\\+[rnt])+:"  # "NAME"\n  : value (strict JSON allows line ends there)
              r"|" + _GATE_SP + r"+(?i:" + _TYPE_WORD + ")" + _GATE_SP + r"*="  # NAME string = "value" (Go, Bicep)
              r"|(?:\\*[\"'])?\]?" + _GATE_SP + r"*\(" + _GATE_SP + r"*\\*[\"']"  # NAME("value")
              # NAME 'v', NAME v$
              r"|" + _GATE_SP + r"+(?:\\*[\"']|\[|(?i:is|was)" + _GATE_SP + r"|[^\s\"'`=:]+" + _GATE_SP
              + r"*(?:[\r\n\\\"]|$)))"
              # <NAME>
              r"|<(?:[\w.\-]*:)?[\w.\-]*" + _GATE_KW + _GATE_NAMECHARS + r"*(?:\\*[\"'])?\]?" + _GATE_SP + r"*>")
_GATE_PAIR = (r"<(?i:name|key)>[^<\n]*" + _GATE_KW + "|"
              r"(?i:name|key|parameterkey|optionname|variable|label|element)\\*[\"']?" + _GATE_SP + r"*[:=]" + _GATE_SP
              + r"*\\*[\"']?[\w./\-]*" + _GATE_KW + r"|(?i:variable)" + _GATE_SP + r"+\\*[\"'][\w.\-]*" + _GATE_KW)
# a collection named tokens (the gate's names leave out "tokens": MAX_TOKENS is everywhere): tokens = [, "tokens": {,
# and a YAML list (tokens: then - V; not Python's "if n > MAX_TOKENS:" or "for t in tokens:" and its block)
_GATE_CONTAINER = (r"(?i:tokens)\\*[\"']?" + _GATE_SP + r"*[:=]" + _GATE_SP + r"*[\[{]"
                   r"|(?:^|[^\w.\-])(?i:tokens)" + _GATE_SP + r"*:" + _GATE_SP + r"*(?:\r?\n|\\+r?\\+n)"
                   + _GATE_SP + r"*-"
                   # round 10: a YAML map named *tokens whose keys are the tokens (allowed_tokens: then V: ci)
                   r"|(?i:tokens)" + _GATE_SP + r"*:" + _GATE_SP + r"*(?:\r?\n|(?:\\+r)?\\+n)" + _GATE_SP
                   + r"+[A-Za-z0-9_\-]{16}")
_GATE_CLI = (r"(?:--|(?:^|[\s\"'\[,])-)[\w\-]*(?:pass|pwd|token|key|secret|auth|cred|sig)[\w\-]*" + _GATE_SP
             + r"+[^\s\-]")
# An output table's cell naming a secret (round 12): a header over its column or a name beside its value, bounded by a
# cell's edge on one side at least (two spaces, a tab, a bar of ASCII or box drawing; a JSON-escaped tab or line end)
_GATE_BAR = r"[\t|\x{2502}\x{2551}\x{2503}]"
_GATE_GRID = (r"(?:[ \t]{2}|" + _GATE_BAR + r"|\\+t)[ \t]*[\w.\-]*" + _GATE_KW + r"[\w.\-]*(?:[ \t]{2}|[ \t]*(?:"
              + _GATE_BAR + r"|\\+[tnr]|[\r\n]|$))"
              r"|(?:^|\n|\\+n)[ \t]?[\w.\-]*" + _GATE_KW + r"[\w.\-]*(?:[ \t]{2}|[ \t]*(?:" + _GATE_BAR + r"|\\+t))")
_GATE_PLACES = (r"://[^\s/?#@\"'\\<>]*@|PRIVATE KEY|Private-Lines:|(?i:bearer)\s|\s-[upa]|--user|--proxy-user"
                r"|sshpass|htpasswd|\?code=|(?i:set[ \t]+value)"
                r"|importprivkey|(?i:seed|recovery|mnemonic|backup|wallet)[ \t]+(?i:phrase|words)"
                r"|accounts\\*[\"']?[ \t]*[:=][ \t]*\[|(?i:solana)|keypair|\\*[\"']kty\\*[\"']"
                # round 11: commands that set or print a secret
                r"|printf[ \t][^\n]*\||ssm[ \t]+put-parameter|keyvault[ \t]+secret|secretsmanager[ \t]|mc[ \t]+admin"
                r"|secrets[ \t]+versions|-field[= ]|op[ \t]+read[ \t]|config:get|auth:token|output[ \t]+-raw"
                r"|Unseal Key|New value:|(?i:config[ \t]+get)|etcdctl[ \t]+get"
                # round 12: an output table's cell naming a secret; a Netscape cookies.txt line (its 7th field); a
                # name of two words before an aligned "=" (Nomad's Secret ID    = V)
                r"|" + _GATE_KW + r"[\w\-]*[ \t]+[A-Za-z][\w\-]*[ \t]*=[ \t]"
                r"|" + _GATE_GRID + r"|(?:TRUE|FALSE)(?:\t|\\+t)[^\t\n\\]*(?:\t|\\+t)(?:TRUE|FALSE)(?:\t|\\+t)\d"
                r"|pass[ \t]+show|find-(?:generic|internet)-password|bw[ \t]+get|initial-password|wg[ \t]+genkey"
                # round 6: command lines that take a password by position or by a short flag, "config set NAME
                # VALUE", SQL's SET PASSWORD, Go's user:pw@tcp(, a value after || ?? or, a table or a CSV/TSV
                # header naming a secret column, prose ("the password on X is V", "use V as the password") and
                # the word password in other languages
                r"|\\*[\"']-(?:[upaw]|pw)\\*[\"'],"
                r"|zip[ \t]|7z[ar]?[ \t]|(?i:net[ \t]+use|net[ \t]+user)[ \t]|send[ \t]|(?i:insert[ \t]+into)"
                r"|sqlplus|AUTH[ \t]|\w==[^\s=]|rman[ \t]|expdp|impdp|sqlldr|rabbitmqctl"
                r"|smbclient|rpcclient|\s-w[ \t]|\s-pw[ \t]"
                r"|(?i:config(?:ure)?)(?::set|[ \t]+set)[ \t]|(?i:set[ \t]+password)|@(?:tcp|unix|udp)\("
                r"|(?:\|\||\?\?|[ \t]or)[ \t]*\\*[\"']"
                r"|\|[ \t]*[\w .\-]*" + _GATE_KW + r"[\w .\-]*[ \t]*\|[^\n]*\r?\n[ \t]*\|?[ \t]*:?-{3,}"
                r"|(?i:\b(?:use|pass))[ \t]+[^\s]{6,}[ \t]+(?i:as)[ \t]"
                r"|(?:^|[^A-Za-z0-9_])(?i:" + _LOCAL_WORDS.removesuffix("|password|passphrase|passwd") + ")"
                r"|(?i:pass(?:word|phrase|wd))[ \t]+[^\s]*\d"
                r"|(?i:creds|credentials)[^\n./]*[ \t][^\s/]+[ \t]*/[ \t]*[^\s/]"
                r"|(?i:pass(?:word|phrase|wd))(?:'s[ \t]|[ \t]*(?:->|=>|→)|[^\n:=.]*[ \t]"
                r"(?:è|é|es|est|ist|lautet|är|je|jest|là|adalah|ialah|είναι|это|c'est|ay)[ \t])"
                r"|machine\s|\+[1-9]\d{6}|&[A-Za-z_][\w.\-]*=|(?i:identified)|webhookb2|\\(?:u00|x)[2-7][0-9a-fA-F]|\\/"
                r"|(?i:securestring)|echo[ \t][^\n]*\|"
                r"|(?:(?m:^)|\\n|\")[ \t]*\[[\w.\- ]*" + _GATE_KW
                + r"[\w.\- ]*\][ \t]*(?:\r?\n|\\+(?:r\\+)?n)(?:[ \t]*[#;][^\n\\]*(?:\r?\n|\\+(?:r\\+)?n))*"
                r"[ \t]*[^\s=\[#;\\]"
                r"|cat[ \t]+[^\s\\]*(?i:cred|pass|secret|token|api[_\-]?key)[^\s\\]*[ \t]*(?:\r?\n|\\+(?:r\\+)?n)"
                r"|jsonpath="
                # round 7: commands with a secret in a place of their own (_ARG_RULES), echo into a secret file
                r"|mosquitto_|openssl[ \t]|\b(?:un|win)?rar[ \t]|ssh-keygen"
                r"|(?:cargo|vault|bao|wandb|auth)[ \t]+login[ \t]|poetry[ \t]+config|\bb2[ \t]+(?:account|authorize)"
                r"|bundle[ \t]+config|BUNDLE_\w+__|oracle:(?:thin|oci):|(?:ro|rw)community"
                r"|azurewebsites\.net/api/|(?i:appid)=|<<<|printf[ \t][^\n]*\||<\([ \t]*(?:echo|printf)"
                r"|echo[ \t][^\n>|]*>>?[ \t]*[^\s]*(?i:key|secret|token|pass|cred|pem)"
                # round 8: clients' password flags (_ARG_TABLE), Cisco's type 0 and 7, Kubernetes' literals, GitHub
                # Actions' add-mask, a value before forKey:, name/value elements
                r"|(?:^|[^A-Za-z0-9_\-]|\\[nrt])(?:sqlcmd|bcp|osql|isql|ipmitool|snmp|ldappasswd|[xw]?freerdp|nuget"
                r"|mc[ \t]+(?:alias|config)|(?i:psexec)|cqlsh|cbq|lftp|influx|wpa_passphrase|createUser)"
                r"|(?i:catalog|auxiliary)[ \t]*=?[ \t]*[\"']?[\w$#]+/|(?i:secret|key(?:-string)?)[ \t]+[07][ \t]+\S"
                r"|--from-literal|::add-mask::|forKey:|,[ \t]*key:[ \t]*\\*[\"']"
                r"|(?i:basic_auth|bearer_auth|\bauth)[ \t]*\("
                r"|\b(?:https?|xhs?)[ \t](?:[^\n]*[ \t])?-(?:a|-auth)[ \t=]"
                r"|(?i:credential|passwordauthentication|plainauth|basicauth|set_?password|login|authenticate|pdo"
                r"|mysqli(?:_connect)?|(?:change|update)user_?password|dbi->connect)[ \t]*\("
                r"|(?:get|set|init);[ \t]*\}[ \t]*="
                # round 9: positional credentials in well-known calls, gh secret set, macOS security, postfix's
                # sasl_passwd, recovery codes under their heading
                r"|(?:connect|FTP|FTP_TLS|SMTP|SMTP_SSL)[ \t]*\([ \t]*\\*[\"']|gh[ \t]+secret[ \t]|security[ \t]+add-"
                r"|\([ \t]*\\*[\"'](?:localhost|\d{1,3}(?:\.\d{1,3}){3}|[\w\-]+(?:\.[\w\-]+)*\.[a-z]{2,24})"
                r"\\*[\"'][ \t]*,"
                r"|(?:(?m:^)|\\n|\")[ \t]*\[[\w.\-]+\](?::[\w\-]{1,20})?[ \t]+[^\s:\\]+:\S"
                r"|(?i:recovery|backup)[ \t]+codes"
                r"|(?:Client(?:V\d+)?|API|Api|algoliasearch)[ \t]*\([^)\n]*[\"'][A-Za-z0-9_\-]{8}"
                # round 10: values apart from their names (_APART), a prose name before a fenced value, a header pair
                r"|(?i:default|defaultValue|fallback)[ \t]*[=:][ \t]*\\*[\"']|\)[ \t]*(?:\{|do)[ \t]*\\*[\"']"
                r"|\{[ \t]*[a-z_]*" + _GATE_KW + r"\w*[ \t]*,[ \t]*\\*[\"']"
                r"|<t[dh][^>]{0,60}>[ \t]*[\w.\- ]*" + _GATE_KW + r"[\w.\- ]*</t[dh]>"
                r"|/(?i:api[_\-]?key|apikey|token|access[_\-]?token|secret|key)/[A-Za-z0-9_\-.~]{16}"
                r"|input_value=|Property:[ \t]*[\w.\-\[\]]*" + _GATE_KW + r"|>[ \t\r\n]*<(?i:value)>"
                r"|sentinel[ \t]+auth-pass|snmp-server[ \t]+community|[ \t](?i:login)[ \t]|(?i:nickserv)|\s-K[ \t]"
                r"|forHTTPHeaderField:|(?i:\bpat)[ \t]*:"
                r"|(?i:password|passphrase|secret|token|key|credentials?|pat)\b[^.:\n\\]*:[ \t]*(?:\r?\n|\\+n)"
                r"(?:[ \t]*(?:\r?\n|\\+n))*[ \t]*(?:```|~~~|[A-Za-z0-9_\-]{16})"
                # round 10: a secret by position in a well-known call, user:password about to be base64-encoded
                r"|(?:jwt|JWT|Jwt)\.(?:encode|sign|verify|decode)[ \t]*\(|(?:hmac|HMAC|AES|DES3|ChaCha20|Blowfish)"
                r"\.new[ \t]*\(|createHmac|OpenSSL::HMAC|hash_hmac|Fernet[ \t]*\(|SecretKeySpec|WiFi\.begin"
                r"|bind_s[ \t]*\(|simple_bind|Sequelize[ \t]*\(|(?i:credentials)[ \t]*\(|__construct[ \t]*\("
                r"|new[ \t]+PDO|(?:btoa|Buffer\.from|b64encode|encodeToString|encode64|base64_encode"
                r"|EncodeToString)[ \t]*\("
                r"|:(?:\d{1,5}|\*):[^:\s]+:[^:\s]+:\S"
                # a CSV/TSV header naming a secret column; a sentence naming a secret, then ": V" or "is/was/to/as V"
                r"|[,;\t][ \t\"]*[\w.\-]*" + _GATE_KW + r"[\w.\-]*[ \t\"]*(?:[\r\n,;\t]|\\+[nrt])"
                r"|(?m:^)[ \t\"]*[\w.\-]*" + _GATE_KW + r"[\w.\-]*[ \t\"]*[,;\t]"
                r"|(?:\b|_)(?i:password|passphrase|passcode|passwd|secret|token|api[ _\-]?key|credentials?)\b"
                # (round 12: one parenthesis on the way, "token for the team (valid 30d): V", as _PROSE_COLON reads it)
                r"[^.:\n\\=(){}]*(?:\([^()\n\\]*\)[^.:\n\\=(){}]*)?(?::[ \t]*[^\s]|(?i:\bis|\bwas|\bto|\bas)[ \t])")
# Where a token starts (as the shapes' own lookbehind has it), or after an escape that decodes to a line end
# or a tab: the shapes below with counted repeats only start there, so the DFA does not follow them from
# every character.
_GATE_TOKEN_START = r"(?:^|[^A-Za-z0-9_\-]|\\[nrt])"
_GATE_SHAPES = (
    r"sk-|tskey-|gsk_|pplx-|tgp_v1_|f(?:w|pk)[_\-]|xai-|hf_|api_org_|r8_|lsv2_|pcsk_|tvly-"
    r"|fal_|fc-|bb_live_|am_|exa_|syt_|retaindb_|hsk-|mem0_|brv_|sk_|gAAAA|AIza|GOCSPX-|ya29\.|1//0"
    r"|AKIA|ASIA|ABIA|ACCA|A3T|\dQ~|gh[pousr]_|github_pat_|gl(?:pat|dt|rtr|rt|ptt|cbt|ft|soat|oas|imt|agent|ffct|wt)-"
    r"|GR1348941|AT(?:ATT|CTT|OAT)3|ATBB|npm_|pypi-|rubygems_|dckr_|do[opr]_v1_|HRKU-|v1\.0-|vc[piakr]_"
    r"|nf[pcoa]_|shp(?:at|ca|pa|ss)_|rk_(?:live|test)_|whsec_|SG\."
    r"|key-[0-9a-f]|[0-9a-f]-(?:[0-9a-f]{8}-|us\d)|xox|xapp-|\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{8}"
    r"|lin_|secret_|ntn_|sntry[su]_|eyJ|PMAK-|\.atlasv1\.|hv[sbr]\."
    r"|gl(?:c|sa)_|NRAK-|pscale_|sbp_|dp\.(?:pt|st|sa|ct|scim|audit)\.|AGE-SECRET-KEY-1"
    r"|figd_|sq0(?:atp|csp|idp)-|EAAA|dapi|AKCp|pul-[a-f0-9]|pnu_|CFPAT-"
    r"|sess-|sl\.|A3-|p8e-|sdk-[0-9a-f]|mob-[0-9a-f]|re_"
    r"|LTAI|cmVmd|ABSK|4b1d|CLOJARS_|dnkey-|duffel_|dt0c01\.|EZ[AT]K|EAA[MC]"
    r"|FLW(?:SECK|PUBK)_TEST-|fo1_|fm1[ar]_|fm2_|fio-u-|pat\.|sat\.|ico-|s-s4t2|_mmk"
    r"|API-|sha256~|rdme_|tk-us-|xkeysib-|sm_[aps]at_|shippo_|sgp_|tfp_|AQVN"
    r"|NRJS-|NRII-|sq[upa]_|AAAAAAAAAAAAAAAAAAAAAA|_gitlab_session=|hooks\.slack\.com/|discord(?:app)?\.com/api/webhooks/"
    r"|hooks\.zapier\.com/|make\.com/|integromat\.com/|ifttt\.com/"
    # round 10
    # (a prefix that a word or an escaped line end can spell, as "\napi_key", is followed by a few body characters;
    # Okta's 00… by a character no hex digest has in its first eight)
    r"|nvapi-|csk-[a-z0-9]{8}|e2b_[a-f0-9]{8}|hc[ax][ilm]k_|pat-(?:na|eu|ap)\d-|CCIP(?:AT|RJ)_|sb_secret_"
    r"|AZDO[A-Za-z0-9]{4}|oauth:[a-z0-9]|xa[ap]t-|bk(?:ua|at)_[a-f0-9]{8}|rnd_[A-Za-z0-9]{8}|napi_[a-z0-9]{8}"
    r"|access-(?:sandbox|development|production)-|BBDC-|SWMTKN-"
    r"|v[1-4]\.local\.|aio_[A-Za-z0-9]{8}|jina_[A-Za-z0-9]{8}|0201036c6e64|phx_[A-Za-z0-9]{8}|dd[pw]_[A-Za-z0-9]{8}"
    r"|" + _GATE_TOKEN_START + r"(?:BSA[A-Za-z0-9]{8}|00[A-Za-z0-9_\-]{0,6}[g-zA-Z][A-Za-z0-9_\-]{3}|[012]/\d{8}"
    r"|(?:live|sandbox)_[A-Za-z0-9_\-]{0,7}[A-Z0-9]"
    r"|test_[a-f0-9]{8}|as-[A-Za-z0-9]{8}|pk_\d|st\.[0-9a-f]{8}-|pa-[A-Za-z0-9_\-]{8}|u\+[A-Za-z0-9_\-]{8})"
    r"|" + _GATE_TOKEN_START + r"(?:SK[0-9a-fA-F]{8}|AC[0-9a-f]{8}"
    r"|(?:bot)?\d{8,12}:[A-Za-z0-9_\-]{30}|s\.[A-Za-z0-9]{24}|AAAA[A-Za-z0-9_\-]{7}:"
    r"|pat[A-Za-z0-9]{14}\.|t1\.[A-Za-z0-9_\-]|oy2[a-z0-9]"
    # round 11
    r"|cio[A-Za-z0-9]{8}|pk_[a-f0-9]{8}|SEC[a-f0-9]{8}|[xtyzuv]prv[1-9A-HJ-NP-Za-km-z]{8}|nsec1[02-9ac-hj-np-z]{8})"
    r"|pdl_(?:live|sdbx)_|access_token\$|RWRTY0Iy|\.[A-Za-z0-9_\-]{6}:[A-Za-z0-9_\-]{8}|/hooks/[A-Za-z0-9]{8}"
    r"|/bot/v2/hook/")

# Base64 of ASCII text (printable, tabs and line ends): in each group of four characters, the first
# holds the top six bits of a byte in 0x20-0x7e or \t \n \r (C, D, I-Z, a-f), the second four bits of the
# next one (whose top nibble is 0 or 2-7) and the third the two top bits of the third byte (0 or 1).
# Six such groups (18 characters of text) at the start of a run are rare in anything but encoded text:
# random base64 (an image) starts so about once in two million runs, hex and words almost never.
_B64_GROUP = r"[CDI-Za-f][AC-HQS-Xgi-nwy-z0-3][ABEFIJMNQRUVYZcdghklopstwx014589][A-Za-z0-9+/_\-]"
# (round 12: hex of text too, sixteen printable bytes at a run's start: echo 7061… | xxd -r -p; eight let 65 more of the
# bench store's 240,000 texts through the gate, git SHAs that start so, twelve 3, sixteen none)
_HEX_TEXT = r"(?:[2-7][0-9a-fA-F]){16}"
_GATE_B64 = (_GATE_TOKEN_START + "(?:(?:" + _B64_GROUP + "){6}|" + _HEX_TEXT + ")")  # where a run starts, as the rule
# reads it


# What can hide a name or a separator from the patterns above: an ANSI escape, a zero-width character, a \uXXXX
# escape (JSON inside JSON), a Cyrillic or Greek letter (a look-alike inside a Latin name). A text the rules
# cannot match otherwise is looked at again without them (HIDDEN is never among the kinds gate() returns).
_GATE_HIDDEN = (r"\x1b|[\x{200b}-\x{200d}\x{2060}\x{feff}]|\\u[0-9a-fA-F]{4}|[\x{370}-\x{3ff}\x{400}-\x{52f}]"
                r"|%(?:3[dDaA]|2[27])|&(?:quot|lt|gt|apos|#3[49]|#x2[27]);")


def _compile_gate() -> Any:
    """RE2's set matcher: it only says whether anything matches, which its DFA answers alone (a
    search for where would cost a second pass). Patterns with long counted repeats that can start
    anywhere (a Discord token's [MNO]x{23,27}) are given by a shorter superset: they multiply the
    DFA's states, and the gate's speed, by several."""
    import re2

    options = re2.Options()
    options.max_mem = 64 << 20
    gate = re2.Set.SearchSet(options)
    names = "|".join((_GATE_NAME, _GATE_PAIR, _GATE_CLI, _GATE_CONTAINER))
    for pattern in (names, _GATE_SHAPES, _GATE_PLACES, _GATE_B64, _GATE_HIDDEN):
        gate.Add(pattern.encode())  # indices NAMES, SHAPES, PLACES, BASE64: which rules can match; HIDDEN
    gate.Compile()
    # the binding's own Set (a list of hits, empty for none): its Python wrapper cost as much as the
    # DFA's whole pass over a typical message
    return getattr(gate, "_set", gate).Match


NAMES, SHAPES, PLACES, BASE64, HIDDEN = 0, 1, 2, 3, 4
_SET_MATCH = _compile_gate()
# A keyword argument passing on a variable of its own name (OpenAI(api_key=api_key), f(token=token, …)):
# code, which the name rules skip (a value equal to its name is no value), and the commonest reason the
# gate lets a clean text through (in the benchmark's transcripts, 3 of 4 such texts held nothing else).
_KWARG_VALUE = re.compile(rb"=[ \t]*([A-Za-z_]\w{0,100})[ \t]*[,)]")
_NAME_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.$-")
# A tool call's id (OpenAI's call_ and Anthropic's toolu_, then 20 or more random letters and digits) is on
# every tool call and its result, and one in 40 holds a keyword by chance (call_…Pw…", "type": the gate's
# "NAME", value): no rule takes it for a name (name_kind), so the second look sets its body aside too (as
# x's: no keyword). The borders are those of the name the rules would read (nothing of a name before it,
# not a longer name after it: a letter, digit, _, -, a dotted part or a non-ASCII letter).
_TOOL_CALL_ID_BYTES = re.compile(rb"(?<![A-Za-z0-9_.$\-])(?:call|toolu)_([A-Za-z0-9]{20,64})"
                                 rb"(?![A-Za-z0-9_\-\x80-\xff]|\.[A-Za-z0-9_\-\x80-\xff])")


def _gate(data: bytes) -> Any:
    """gate(utf8_bytes): which kinds of rule (NAMES, SHAPES, PLACES, BASE64) could find something in
    the text; empty when none can. A text that only a name could be found in takes a second look
    with its same-name keyword arguments set aside (their "=" made NUL, which no rule takes) and the
    bodies of its tool call ids (which no rule takes for a name)."""
    hits = _SET_MATCH(data)
    if not hits:
        return hits  # most texts: nothing more to ask
    if HIDDEN in hits:
        hits.remove(HIDDEN)
        if not hits:
            return _unhidden(data)
    if hits == [NAMES]:
        spared = None
        for m in _KWARG_VALUE.finditer(data):
            value = m.group(1)
            end = m.start()
            while end and data[end - 1] in b" \t":
                end -= 1  # the name ends before its spaces
            start = end - len(value)
            if start >= 0 and data[start:end] == value and (start == 0 or data[start - 1] not in _NAME_BYTES):
                spared = spared or bytearray(data)
                spared[m.start()] = 0
        if b"call_" in data or b"toolu_" in data:
            for m in _TOOL_CALL_ID_BYTES.finditer(data):
                if _random_id(m.group(1)):
                    spared = spared or bytearray(data)
                    spared[m.start(1):m.end(1)] = b"x" * (m.end(1) - m.start(1))
        if spared is not None:
            hits = _SET_MATCH(bytes(spared))
            if HIDDEN in hits:
                hits.remove(HIDDEN)
    return hits


def _random_id(body: Any) -> bool:
    """A tool call id's body (str or bytes of ASCII letters and digits): a digit, a capital and a small letter."""
    return not body.isalpha() and body.upper() != body and body.lower() != body


def _unhidden(data: bytes) -> Any:
    """The gate's kinds for a text read without what hides a name from it: ANSI escapes and zero-width
    characters left out, \\uXXXX escapes (JSON inside JSON: contrase\\u00f1a, \\uff1a, \\u001b[36m) read as the
    characters they stand for, Cyrillic and Greek look-alikes inside a Latin word read as Latin."""
    plain = data
    if b"\\u" in plain:
        plain = _U_ESCAPE.sub(_u_char, plain)
    plain = _INVISIBLE_BYTES.sub(b"", plain)
    if b"%" in plain or b"&" in plain:
        plain = _ENCODED_BYTES.sub(lambda m: _ENTITY_BYTES.get(m.group().lower(), m.group()), plain)
    if b"\xd0" in plain or b"\xd1" in plain or b"\xce" in plain or b"\xcf" in plain or b"\xd4" in plain:
        text = plain.decode("utf-8", "surrogatepass")
        if _MIXED_SCRIPT.search(text):  # pаssword with a Cyrillic а
            plain = _latin(text).encode("utf-8", "surrogatepass")
    if plain == data:
        return []
    hits = _SET_MATCH(plain)
    if HIDDEN in hits:
        hits.remove(HIDDEN)
    return hits


_U_ESCAPE = re.compile(rb"\\+u([0-9a-fA-F]{4})")
# A name percent-encoded (a query inside a query: ?next=%2Flogin%3Fpassword%3D…) or HTML-escaped (a web page a
# tool fetched: &lt;password&gt;…, {&quot;api_key&quot;: …): read decoded, masked where it is stored
_ENTITIES = {"%3d": "=", "%3a": ":", "%22": '"', "%27": "'", "%26": "&", "%3f": "?", "%2f": "/", "%20": " ",
             "%40": "@", "%2b": "+", "%2c": ",", "%3b": ";", "%7b": "{", "%7d": "}", "%5b": "[", "%5d": "]",
             "&quot;": '"', "&lt;": "<", "&gt;": ">", "&apos;": "'", "&#34;": '"', "&#39;": "'", "&#x22;": '"',
             "&#x27;": "'", "&amp;": "&", "&#10;": "\n", "&nbsp;": " "}
_ENTITY_BYTES = {k.encode(): v.encode() for k, v in _ENTITIES.items()}
_ENCODED = re.compile("(?i)" + "|".join(re.escape(k) for k in _ENTITIES))
_ENCODED_BYTES = re.compile(b"(?i)" + b"|".join(re.escape(k) for k in _ENTITY_BYTES))
_ENCODED_NAME = re.compile(r"(?i)%(?:3[da]|2[27])|&(?:quot|lt|gt|apos|#3[49]|#x2[27]);")


def _find_decoded(text: str) -> list[tuple[int, int]]:
    """:func:`_find` of *text* with its percent-encoding and HTML entities decoded, in the offsets of *text*."""
    starts: list[int] = []  # the offset in text of each decoded character
    parts = []
    pos = 0
    for m in _ENCODED.finditer(text):
        parts.append(text[pos:m.start()])
        starts.extend(range(pos, m.start()))
        parts.append(_ENTITIES[m.group().lower()])
        starts.append(m.start())
        pos = m.end()
    parts.append(text[pos:])
    starts.extend(range(pos, len(text)))
    starts.append(len(text))
    plain = "".join(parts)
    low = plain.lower()
    out = []
    for a, b in _find(plain, low, _words(low)):
        # the end: where the next decoded character starts (an encoded last character is masked whole)
        out.append((starts[a], starts[b]))
    return out


def _u_char(m: re.Match) -> bytes:
    return chr(int(m.group(1), 16)).encode("utf-8", "surrogatepass")


_GATE = gate = _gate


def redact_gated(text: str, hits: Any) -> str:
    """:func:`redact_text` of a text :func:`gate` gave *hits* for."""
    if len(text) < 8:
        return text
    return redact_text(text) if len(text) <= 64 or 4096 <= len(text) <= 65536 else _redact(text, hits)


def _looks_random(token: str) -> bool:
    """Generated credentials mix digits with letters, or both cases throughout (base64); words and
    identifiers (sk_learn_model, AuthenticationProvider) do not."""
    has_digit = any(c.isdigit() for c in token)
    upper = sum(c.isupper() for c in token)
    lower = sum(c.islower() for c in token)
    if has_digit and upper + lower:
        return True
    return len(token) >= 12 and upper >= 3 and lower >= 3 and 0.2 <= upper / (upper + lower) <= 0.8


_SNAKE = re.compile(r"[a-z]+(?:[_\-][a-z0-9]+)*")


def _random_body(token: str) -> bool:
    """The part after the prefix is random, not snake_case words (sk_learn_model_v2, am_pm_format);
    a body of 30 or more that is not words counts as a key whatever its letters."""
    if token.startswith(("u+", "00", "BSA")):
        return _looks_random(token[2:])  # no separator after these prefixes: the body is the rest
    body = re.split(r"[_\-.]", token, maxsplit=1)[-1]
    if _SNAKE.fullmatch(body) and max(len(s) for s in re.split(r"[_\-]", body)) < 16:
        return False
    return len(body) >= 30 or (len(body) >= 10 and _looks_random(body))


# -- names ----------------------------------------------------------------------------------------
# A name is found at a keyword inside it; the regex is only run on text whose lower-cased form holds
# one of _NAME_TRIGGERS.
_NAME_TRIGGERS = ("key", "token", "pass", "secret", "auth", "sig", "cred", "pw", "dsn", "cookie", "jwt", "bearer",
                  "mnemonic", "psk", "sessid", "jsession", "salt", "encrypt", "sessionid")
# Bounded repeats: a keyword inside a long run ("keykeykey...") costs at most ~100 steps, never the run.
_TAIL_SEP = (r"(?P<n>[\w\-]{0,100}(?:\.[\w\-]{1,100}){0,10})(?P<q>\\*[\"']|`)?(?P<sub>\])?"
             # "AWS Secret Access Key [None]: …" (aws configure) puts a bracket before the colon
             r"(?:(?P<sep>(?:[ \t]+\[[^\]\n]{0,20}\])?(?:(?<=[\"'])\s{1,40}(?=:)|[ \t]*)"
             # a type between the name and "=": api_key: str = …, apiKey: string = …, TOKEN: &str = …
             r"(?::[ \t]*[&*]?[\w.]{1,40}(?:<[^<>\n]{0,40}>|\[[^\[\]\n]{0,40}\])?\??[ \t]*(?==[^=]))?"
             # NAME=, NAME:, NAME:=, NAME =>, NAME <-; "NAME", value (define, setenv); <NAME>value; NAME("value")
             r"(?::=|=>|<<<|<-|[?+]=|(?:\|\||\?\?|&&)=|=(?!=)|:(?![/:=])|(?P<comma>,)|(?P<xml>>)"
             # LDIF's base64 value (userPassword:: <base64>)
             r"|::(?=[ \t]+[A-Za-z0-9+/]{8,}={0,2}[ \t]*(?:\r?\n|$))"
             r"|(?P<call>\()(?=[ \t]*\\*[\"'])"
             # | NAME | value | (a Markdown table row)
             r"|(?P<cell>\|)(?=[ \t]*[^\s|]+[ \t]*\|)))[ \t]*"
             r"|(?P<prose>[ \t]+(?:is|was)[ \t]+(?:now[ \t]+)?)"
             # a type between the name and "=" (Go's var dbPassword string = "…", Bicep's param x string = '…')
             r"|(?P<typed>[ \t]+" + _TYPE_WORD + r"[ \t]*=(?!=)[ \t]*)(?=\\*[\"'`]|%[qQ]?[(\[{<|])"
             # NAME 'value' (SQL, #define), NAME value at the end of a line (properties, ENV, set -x)
             r"|(?P<ws>[ \t]+)(?=\\*[\"']|[^\s\"'`=:]+[ \t]*(?:\r?\n|$)))"
             # a value follows (on the same line, or a YAML block below), not an obvious code reference
             r"(?=[^\s]|\r?\n)(?!os\.|process\.env|self\.|config\.|settings\.|getenv\(|env\(|args\.|none\b|null\b)")
_KW_SEP = {word: re.compile(word + _TAIL_SEP) for word in _NAME_TRIGGERS}
_KW_SEP_ANYCASE = {word: re.compile(word + _TAIL_SEP, re.IGNORECASE) for word in _NAME_TRIGGERS}
# --password VALUE (the name starts after the dashes)
# (starts with its literal, so SRE jumps from "--" to "--"; the character before is checked after)
_CLI_NAME = re.compile(r"--(?P<n>(?=[a-z_])[\w\-]{0,64}?(?:pass|pwd|token|key|secret|auth|cred|sig)[\w\-]{0,64})"
                       r"[ \t]+(?=[^\s\-])")
# -storepass VALUE, -passin pass:VALUE (keytool, openssl: long names after one dash)
_CLI_SHORT = re.compile(r"(?<=[\s\"'\[,])-(?P<n>[a-z]{0,30}?(?:pass|pwd|token|key|secret|auth|cred)[a-z]{0,30})"
                        r"[ \t]+(?=[^\s\-])")
_NAME_BACK = re.compile(r"[A-Za-z0-9_.\-]*")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_PROSE_VALUE = re.compile(r"[^\s\"'`]{6,}(?<![.,;:!?)])")
_VALUE = re.compile(
    r"(?:[bBrRuU]{1,2}(?=[\"'])|N(?='))?"  # b'…', r"…" (Python, Rust), N'…' (SQL Server)
    r"(?:(?P<esc>\\+)(?P<eqq>[\"'])(?P<eq>.*?)(?P=esc)(?P=eqq)"  # \"value\" inside JSON-encoded strings, any level
    r"|\"\"\"(?P<tq>[\s\S]{0,4096}?)\"\"\"|'''(?P<tsq>[\s\S]{0,4096}?)'''"  # """value""" (TOML, Python), lines too
    r"|\"(?P<dq>(?:[^\"\\\n]|\\.|\\\n)*)\""     # "value" (a shell continuation, backslash-newline, too)
    r"|'(?P<sq>[^'\n]*)'"                        # 'value'
    r"|(?:`|\$\()echo[ \t]+(?P<echo>[^`)\s]+)"      # `echo value`, $(echo value)
    r"|`(?P<bq>[^`\n]+)`"                          # `value` (Markdown inline code)
    r"|\{(?P<br>[^{}\s]+)\}(?=[;\s\"']|$)"              # {value} (ODBC's PWD={…};)
    # Ruby's %q(value), %Q{value}, %(value) (not Python's %(name)s)
    r"|%[qQ]?(?:\((?P<rp>[^()\n]+)\)(?!\w)|\{(?P<rc>[^{}\n]+)\}|\[(?P<rs>[^\[\]\n]+)\]|<(?P<ra>[^<>\n]+)>)"
    r"|(?P<uq>(?:[^\s\"'`\\;&,<>(){}\[\]|]|\\u[0-9a-fA-F]{4})+))")      # bare value (\u escapes too)
_LINE_VALUE = re.compile(r"[^\n\"'\\]*")
_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")

_PASSWORD_WORDS = {"password", "passwd", "pass", "pwd", "pw", "passphrase", "secret", "secrets", "credential",
                   "authtok",
                   "credentials", "creds", "privatekey", "secretkey", "requirepass", "masterauth", "passcode",
                   "passkey", "pincode", "sshpass", "mnemonic", "psk", "bindpw", "rootpw", "adminpw", "passin",
                   "passout"}
# keytool's -storepass, -keypass, -srcstorepass; not the words that end in "pass"
_PASS_NOT = {"bypass", "compass", "encompass", "surpass", "overpass", "underpass", "trespass", "multipass",
             "firstpass", "onepass", "secondpass", "lastpass"}
_TOKEN_WORDS = {"token", "apikey", "accesskey", "authtoken", "accesstoken", "refreshtoken", "signature", "sig",
                "signer",
                "dsn", "bearer", "jwt", "sas", "pat", "jsessionid", "phpsessid", "aspsessionid", "sessionid"}
_FUSED = ("password", "passwd", "secret", "token", "apikey", "credential", "credentials")
_FUSED_NOT = {"tokens", "tokenizer", "tokenize", "secretary", "secrets"}
# A last part that makes the whole name harmless: token_count, KEY_PATH, password_reset ...
_NEUTRAL_LAST = {
    "count", "counts", "type", "types", "length", "len", "limit", "limits", "max", "min", "path", "paths", "file",
    "files", "filename", "dir", "directory", "url", "uri", "endpoint", "host", "name", "names", "id", "ids", "size",
    "ttl", "expiry", "expires", "expiration", "expire", "at", "prefix", "suffix", "header", "env", "var", "field",
    "hint", "policy", "reset", "version", "enabled", "disabled", "required", "format", "usage", "used", "total",
    "budget", "rate", "index", "idx", "provider", "method", "mode", "scheme", "source", "kind", "location",
    "algorithm", "alg", "store", "cache", "manager", "helper", "label", "description", "desc", "help", "prompt",
    "stdin", "command", "cmd", "regex", "pattern", "rule", "rules", "class", "module", "func", "function", "handler",
    "style", "placeholder", "hash", "hashed", "digest", "salt", "strength", "valid", "validation", "confirm",
    "changed", "updated", "created", "rotation", "rotated", "estimate", "estimated", "remaining", "window", "per",
    "spent", "ref", "reference", "arn", "fingerprint", "kid", "number", "num", "list", "map", "set", "check",
    "error", "errors", "status", "state", "exists", "missing", "mask", "masked", "redacted", "fn", "dict", "keys",
    "bits", "secs", "seconds", "ms", "timeout", "exchange", "flow", "grant", "request",
    "response", "server", "service", "scope", "scopes", "audience", "issuer", "user", "username",
    "login", "email", "account", "lifetime", "duration", "age", "weight", "weights", "bias",
    # a setting that chooses how secrets are kept, not one (password_hashing: argon2id, secret_backend: vault)
    "hashing", "hasher", "hashers", "backend", "backends", "engine", "driver", "cipher", "kdf",
    "integrity", "resolved",  # a lock file's entry (package-lock: integrity: sha512-…)
}
# key alone is a secret only beside a qualifier that is not one of these (sort_key, session_key ...).
_KEY_NOT = {"sort", "primary", "foreign", "cache", "partition", "idempotency", "dict", "hot", "shortcut", "map",
            "lookup", "row", "unique", "composite", "index", "group", "routing", "dedup", "dedupe", "object",
            "public", "pub", "search", "order", "join", "shard", "sharding", "entry", "message", "translation",
            "label", "field", "column", "table", "hash", "sequence", "session", "host", "known", "idempotent",
            "natural", "surrogate", "candidate", "range", "react", "list", "bucket", "prefix", "item", "record",
            "element", "media", "keyboard", "press", "hotkey", "i18n", "config", "metadata", "matching",
            "socket", "websocket",  # Sec-WebSocket-Key: a handshake nonce (RFC 6455), not a credential
            "registry", "cursor", "continuation", "pagination", "page", "next", "custom", "encoded",
            "serialization", "the", "a", "this", "that", "my", "your", "to", "of",
            "for", "with", "by", "from"}  # forKey: "apiToken" (Swift, Objective-C) names the key, it holds none
# key_material, KEY_VALUE: the key itself
_KEY_MATERIAL = {"material", "value", "data", "content", "contents", "string", "str", "text", "b64", "base64", "hex",
                 "pem", "bytes", "blob", "raw", "secret", "octet", "octets"}
_AUTH_HEADERS = {"authorization", "proxy-authorization"}
_LINE_HEADERS = {"cookie", "set-cookie"}
_SCHEMES = {"bearer", "basic", "token", "digest", "bot", "apikey", "api-key", "ssws", "negotiate", "ntlm", "hmac",
            "aws4-hmac-sha256", "key", "sharedkey", "sharedaccesssignature", "oauth", "dpop"}

_NOT_VALUES = {
    "true", "false", "yes", "no", "on", "off", "null", "none", "nil", "undefined", "nan", "string", "str", "int",
    "bytes", "bool", "boolean", "number", "any", "object", "optional", "required", "secretstr", "reset", "expired",
    "invalid", "incorrect", "wrong", "missing", "empty", "hidden", "changed", "updated", "the", "a", "an", "is",
    "was", "are", "be", "not", "must", "should", "will", "can", "please", "see", "use", "enter", "your", "my", "this",
    "that", "it", "from", "for", "in", "to", "of", "and", "or", "with", "here", "there", "below", "above",
    "set", "unset", "provided", "ok", "redacted", "masked", "xxx", "***", "...", "…", "todo", "tbd",
    "if", "when", "then", "else", "env", "environment", "value", "values", "default", "example", "sample", "stored",
    "saved", "rotated", "revoked", "valid", "used", "type", "text", "file", "secret", "password", "token", "key",
    "files", "compat", "sss", "nis", "winbind", "systemd",  # nsswitch.conf's sources (passwd: files systemd)
    # a plain word naming an algorithm or a backend (hashing: argon2id, secret_store: vault): a choice, not a secret
    "argon2", "argon2id", "argon2i", "bcrypt", "scrypt", "pbkdf2", "pbkdf2_sha256", "sha256", "sha512", "sha1", "md5",
    "hs256", "hs384", "hs512", "rs256", "es256", "vault", "keyring", "keychain", "kms",
}
# A version or a version range (package.json: "jsonwebtoken": "^9.0.2", "csrf-token": "3.1.0"): no secret
_VERSION = re.compile(r"(?:[\^~]|[<>]=?|==?)?[ \t]*v?\d{1,6}(?:\.(?:\d{1,6}|[x*])){1,3}(?:-[\w.]{1,40})?"
                      r"(?:\+[\w.]{1,40})?"
                      r"(?:[ \t]*(?:\|\||-|[<>]=?)[ \t]*v?\d{1,6}(?:\.(?:\d{1,6}|[x*])){0,3}(?:-[\w.]{1,40})?)*")
_CODE_ROOTS = {"self", "this", "os", "process", "config", "settings", "cfg", "env", "args", "opts", "options",
               "params", "request", "req", "ctx", "context", "app", "conf", "data", "payload", "body", "response",
               "resp", "module", "window", "secrets", "vars", "inputs", "props", "state", "client", "creds",
               "credentials", "auth", "user", "account", "kwargs", "st", "flask", "django", "import", "builtins",
               "fs", "pkgs", "lib", "random_password"}
_PCT_VAR = re.compile(r"%[A-Za-z_][\w.]*%")
_BRACED_KEY = re.compile(r"\{[A-Za-z0-9+/]{16,}={0,2}\}")
_PUBLIC_SHAPE = re.compile(r"pk_(?:live|test)_[A-Za-z0-9]{20,}|pk\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}")
# (round 12: sha256=<hex> too, a webhook's HMAC of its body: X-Hub-Signature-256 signs a body, it is no key)
_DIGEST = re.compile(r"(?i:sha(?:1|224|256|384|512)|md5)(?:[:=][0-9a-fA-F]{32,128}|-[A-Za-z0-9+/]{27,88}={0,2})")
# An LDAP password hash (RFC 2307's {SCHEME}hash; LDIF's userPassword:: holds it base64-encoded): a hash, as
# crypt's $6$… is, not the password ({CLEARTEXT} is not among the schemes: it is the password)
_LDAP_HASH = re.compile(r"\{(?i:s?sha(?:224|256|384|512)?|s?md5|crypt|pbkdf2[\w\-]{0,20}|argon2\w{0,4}|bcrypt|scrypt"
                        r"|pkcs5s2|ssha\d{3})\}[A-Za-z0-9+/=$.,_\-]{8,}")
_PLACEHOLDER_BODY = re.compile(r"(?:[A-Za-z0-9]{1,10}[_\-]){0,3}(?:x{6,}|X{6,}|\*{6,}|0{12,})")
_CLOSED_IDENT = re.compile(r"[A-Za-z_][\w.]*[)}\]]+[,;]?")
_CMDLET = re.compile(r"(?:Read|Get|ConvertTo|ConvertFrom|Import|New|Invoke|Unprotect)-[A-Z][A-Za-z]+")
_MOUNT_SPEC = re.compile(r"(?:id|type|src|source|target|dst|env|mode|required)=[^\s,]*")
# Helm's existingSecret and …PasswordKey name a Secret and a key in it; their values are such names
_REF_NAME = re.compile(r"^(?i:existing)|(?i:password)_?(?i:key)$|^(?!client|app|api|consumer|jwt|webhook|shared|signing"
                       r"|session|cookie|master|root|admin)[a-z]+Secret$")  # Helm's certificatesSecret: a Secret's name
_K8S_NAME = re.compile(r"[a-z][a-z0-9]*(?:[\-.][a-z][a-z0-9]*)+")
_IDENT = re.compile(r"[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*")
_PATH = re.compile(r"(?:~|\.\.?)?(?:/[\w.\-@]+)+/?")


_TOOL_CALL_ID = re.compile(r"(?:call|toolu)_([A-Za-z0-9]{20,64})")


_FILE_EXTS = {"csv", "json", "txt", "yaml", "yml", "xml", "toml", "ini", "log", "md", "zip", "gz", "tar", "bak"}


@lru_cache(maxsize=4096)
def name_kind(name: str) -> str | None:
    """How a name that says secret is treated: "password" (any value), "token", "random" (only a
    random-looking value), "auth"/"line" (HTTP headers), or None for a harmless name."""
    if name.startswith(("call_", "toolu_")):
        m = _TOOL_CALL_ID.fullmatch(name)
        if m is not None and _random_id(m.group(1)):
            return None  # a tool call's id (call_…Pw…): the gate sets these aside (_TOOL_CALL_ID_BYTES)
    low = name.lower().lstrip("-_@$")
    if low.rpartition(".")[2] in _FILE_EXTS and "." in low:
        return None  # credentials.csv: a file's name (its checksum, its size follow), not a setting's
    if low in _AUTH_HEADERS:
        return "auth"
    if low in _LINE_HEADERS:
        return "line"
    parts = [p.lower() for p in _PARTS.findall(name)]
    parts = [p for p in parts if not p.isdigit()] or parts
    if parts[-3:] == ["private", "key", "id"]:
        return "token"  # a GCP service account's private_key_id: it names the live key, masked with it
    if parts[-2:] == ["secret", "id"]:
        return "secret_id"  # Vault AppRole's secret_id (a UUID); Secrets Manager's SecretId names a secret
    if len(parts) >= 2 and (parts[-1] == "salt" and name.isupper() or parts[-1] == "cookie") \
            or parts in (["encrypt"], ["gossip", "key"], ["routing", "key"], ["integration", "key"]):
        # round 11: WordPress's AUTH_SALT (a constant named *_SALT, not a hash's salt column), RABBITMQ_ERLANG_COOKIE,
        # Consul's gossip encrypt key, PagerDuty's routing_key (RabbitMQ's is a word: only a random value is masked)
        return "random"
    if not parts or parts[-1] in _NEUTRAL_LAST:
        return None
    kind = None
    for i, part in enumerate(parts):
        if part in _PASSWORD_WORDS or part.endswith("pass") and part not in _PASS_NOT:
            return "password"
        if part in _TOKEN_WORDS or (part not in _FUSED_NOT and part.endswith(_FUSED)):
            if part.endswith(("password", "passwd", "secret", "credential", "credentials")):
                return "password"
            kind = "token"
        elif part == "key":
            qualifier = parts[i - 1] if i else ""
            following = parts[i + 1] if i + 1 < len(parts) else ""
            if following in _KEY_MATERIAL or (qualifier and qualifier not in _KEY_NOT and not following):
                kind = kind or "token"
            elif not qualifier and len(parts) == 1:
                kind = kind or "random"
        elif part in ("auth", "authorization") and kind is None:
            kind = "token" if i and i == len(parts) - 1 else "random"  # NPM_AUTH, BASIC_AUTH; auth alone
    return kind


# -- collections named as secrets ----------------------------------------------------------------
# api_keys: [V], passwords: {prod: V}, secrets:\n  stripe: V, [secrets]\n stripe = "V", tokens = ["V"]: the name is
# the collection's, and its values sit under harmless names of their own (or none). A value directly in such a
# collection is masked when it looks like a credential on its own; a child named harmlessly (user, host, region,
# url ...) or a secret by its own name (the name rules judge it) is left to those.
@lru_cache(maxsize=4096)
def container_kind(name: str) -> str | None:
    """"password" or "token" for a collection named as secrets (plural too: passwords, api_keys, tokens), else None."""
    if "/" in name:
        return None  # node_modules/jsonwebtoken, @types/jsonwebtoken: a package, not a collection of tokens
    kind = name_kind(name)
    if kind not in ("password", "token") and len(name) > 3 and name[-1] in "sS":
        kind = name_kind(name[:-1])  # api_keys, passwords, tokens, AUTH_TOKENS
    if kind is None and name.lower().endswith(("-oauth", "_oauth", ".oauth")):
        return "token"  # composer's "github-oauth": {"github.com": "V"} (a map of hosts to tokens)
    return kind if kind in ("password", "token") else None


def secret_key(key: str, kind: str) -> bool:
    """A key of a collection named as secrets that is itself a credential ({"api_keys": {"V": {…}}}, allowed_tokens:
    then V: ci): what contained_secret takes, 16 characters or more and random-looking (not a name: prod, partner-a)."""
    return (len(key) >= 16 and _looks_random(key) and len(_PARTS.findall(key)) * 4 >= len(key)
            and contained_secret(key, kind))  # short parts: not X509CertificateThumbprint


def _neutral_child(name: str) -> bool:
    parts = [p.lower() for p in _PARTS.findall(name)]
    return not parts or parts[-1] in _NEUTRAL_LAST or name_kind(name) is not None


_SYMBOLS = frozenset("!#$%^&*+=~@?")


def contained_secret(value: str, kind: str) -> bool:
    """A value in a collection named as secrets (kind: its container_kind) that looks like a credential alone, 8
    characters or more: a symbol with digits or both cases, both cases and digits, or a random-looking 16 (a
    token: both cases and digits, 32 hex digits, or a symbol with a digit). Words, versions, regions, hosts, paths
    and addresses are not."""
    v = value.strip()
    if len(v) < 8 or len(v) > 512 or MASK in v or any(c.isspace() for c in v) or _HOST.fullmatch(v) and v.islower() \
            or _EMAIL.fullmatch(v) or not _value_is_secret(v, "password", True):
        return False
    digit = any(c.isdigit() for c in v)
    symbol = any(c in _SYMBOLS for c in v)
    upper, lower = v.lower() != v, v.upper() != v
    if kind == "password":  # not eu-west-1, gpt-4o, v2.4.1: a word with a digit
        return symbol and (digit or upper and lower) or upper and lower and digit or len(v) >= 16 and _looks_random(v)
    return (len(v) >= 10 and upper and lower and digit or len(v) >= 32 and _HEX_KEY.fullmatch(v) is not None
            or symbol and digit and (upper or lower))


_EMAIL = re.compile(r"[^@\s]+@[\w\-]+(?:\.[\w\-]+)+")
_INLINE_ITEM = re.compile(r"\s*(?:(?P<k>[\w.\-]{1,100}|\"[^\"\n]{1,100}\"|'[^'\n]{1,100}')\s*[:=]\s*)?"
                          r"(?:\"(?P<d>[^\"\\\n]*)\"|'(?P<s>[^'\n]*)'|(?P<u>[^\s,\]}\"'#][^,\]}\n]*?))"
                          r"(?:\s*,|[ \t]*(?=\r?\n)|\s*(?=[\]}]))")  # HCL's map: one item a line, no commas
_BLOCK_ITEM = re.compile(r"[ \t]*(?:-[ \t]+|(?P<k>[\w.\-]{1,100}|\"[^\"\n]{1,100}\"|'[^'\n]{1,100}')[ \t]*[:=][ \t]*)"
                         r"(?:\"(?P<d>[^\"\\\n]*)\"|'(?P<s>[^'\n]*)'|(?P<u>[^\s\"'#|>\[{](?:[^\n]*?[^\s])?))"
                         r"(?:[ \t]+#[^\n]*)?[ \t]*\r?$")


def _container_spans(text: str, start: int, pos: int, spans: list[tuple[int, int]]) -> None:
    """The values directly in a collection named as secrets: the name starts at *start*, its value at *pos* (an
    inline [ or {, or the line end of a YAML block)."""
    name = text[start:pos].split(":")[0].split("=")[0].strip(" \t\"'\\]")
    kind = container_kind(name)
    if kind is None:
        return
    if text[pos] in "[{":  # an inline list or map (TOML, YAML flow, Python, JS): up to its closing bracket
        close = "]" if text[pos] == "[" else "}"
        end = text.find(close, pos + 1, pos + 4096)
        at = pos + 1
        while 0 <= at < end:
            m = _INLINE_ITEM.match(text, at, end + 1)
            if m is None or m.end() == at:
                break
            _contained_item(m, kind, spans)
            at = m.end()
        return
    line_start = text.rfind("\n", 0, start) + 1
    indent = start - line_start
    at = text.find("\n", pos) + 1
    child = None
    while 0 < at < len(text):
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        line = text[at:end]
        content = line.lstrip(" \t")
        if content.strip() and not content.startswith("#"):
            depth = len(line) - len(content)
            if depth <= indent and not (content.startswith("- ") and depth == indent):
                break  # the collection ended (a list may sit at its name's own indent in YAML)
            child = depth if child is None else child
            if depth == child:  # a direct child, not a deeper one
                m = _BLOCK_ITEM.match(text, at, end)
                if m is not None:
                    _contained_item(m, kind, spans)
        at = end + 1


def _contained_item(m: re.Match, kind: str, spans: list[tuple[int, int]]) -> None:
    key = m.group("k")
    if key is not None and secret_key(key.strip("\"'"), kind):
        lo, hi = m.span("k")
        quoted = key[:1] in "\"'"
        spans.append((lo + quoted, hi - quoted))  # the key is the credential (its value names its owner)
        return
    if key is not None and _neutral_child(key.strip("\"'")):
        return  # user:, host:, region: … or a name the name rules judge
    g = "d" if m.group("d") is not None else "s" if m.group("s") is not None else "u"
    if contained_secret(m.group(g), kind):
        lo, hi = m.span(g)
        hi -= len(m.group(g)) - len(m.group(g).rstrip())
        spans.append((lo, hi))


# Values that are never the secret their name promises (round 11, clean look-alikes of hostile round 4): a crypt
# hash with or without its user (htpasswd's user:$apr1$…, documented: a hash is not the password), a keyboard chord
# (the browser tool's {"key": "Control+Shift+KeyI"}), an ARN (ECS's valueFrom beside "name": "DB_PASSWORD": where the
# secret lives), a relative path in lower case (an S3 object's "Key": "exports/…/api-keys-audit.csv").
_NOT_SECRET_VALUE = re.compile(
    r"(?:[\w.\-@]{1,64}:)?\$(?:apr1|1|2[abxy]?|5|6|y|gy|7|argon2(?:id|i|d)|scrypt|pbkdf2[\w\-]*)\$[./\w$=+,\-]{8,}"
    r"|(?:(?i:control|ctrl|shift|alt|altgr|option|opt|meta|cmd|command|super|win)\+){1,4}[A-Za-z0-9][A-Za-z0-9]{0,19}"
    r"|arn:aws[\w\-]*:[\w\-]+:[\w\-]*:\d{0,12}:[^\s\"']+"
    r"|[a-z0-9_\-.@]+(?:/[a-z0-9_\-.@]+)+/?")
_LABEL_WORD = re.compile(r"(?:[A-Z]{2,5}|[A-Za-z][a-z]*)[?.!:]?")
_LABEL_NAMES = {"password", "passphrase", "key", "token", "secret", "pin", "passcode", "credentials", "credential"}


def _is_label(value: str, name: str) -> bool:
    """A UI label under a secret's name (locales/en.json's "api_key": "API key", "token": "Access token"): words
    only, one of them the thing the name names."""
    words = value.split()
    if not 2 <= len(words) <= 8 or not all(_LABEL_WORD.fullmatch(w) for w in words):
        return False
    return any(w.rstrip("?.!:").lower() in _LABEL_NAMES for w in words)


def _value_is_secret(value: str, kind: str, quoted: bool, name: str = "") -> bool:
    v = value.strip()
    if not v or MASK in v or len(v) < 3:
        return False
    if kind == "secret_id":
        return _UUID.fullmatch(v.strip("\"'")) is not None
    if v.endswith(("...", "…")) and len(v.rstrip(".…")) <= 10:
        return False  # sk-..., ghp_…: a prefix shown as a placeholder
    low = v.lower()
    if low in _NOT_VALUES or low.strip("*.x…") == "":
        return False
    if _NOT_SECRET_VALUE.fullmatch(v) or " " in v and _is_label(v, name):
        return False  # a crypt hash (user:$apr1$…), a key chord, an ARN, a relative path; a label ("API key")
    if v[0] == "{" and _LDAP_HASH.fullmatch(v) or v[:2] in ("e0", "e1") and _ldap_hash_b64(v):
        return False  # {SSHA}…, userPassword:: e1NTSEF9… (round 12): a password hash, as $6$… is
    if _DIGEST.fullmatch(v) or _PLACEHOLDER_BODY.fullmatch(v):
        return False  # sha256:<hex>, sha512-<base64> (a hash, an integrity value); sk_live_xxxx… (a placeholder)
    if not quoted and (_CLOSED_IDENT.fullmatch(v) or _CMDLET.fullmatch(v) or _MOUNT_SPEC.fullmatch(v)):
        return False  # api_key} (code closing a brace), Read-Host (a cmdlet reads it), id=npmrc (a mount spec)
    if name and _REF_NAME.search(name) and _K8S_NAME.fullmatch(v):
        return False  # existingSecret: pg-credentials, adminPasswordKey: postgres-password (a Secret's, a key's name)
    if v[0] == "{" and _BRACED_KEY.fullmatch(v) and _looks_random(v):
        return True  # Maven's encrypted {…} password (reversible with the master password), not a template
    if v[0] in "$<{" or v.startswith(("%(", "%env(", "#{")) or v.endswith(">") or _PCT_VAR.fullmatch(v):
        return False  # placeholders, templates, variables (Symfony's %env(X)%, Ruby's #{…}, %VAR%)
    if _PUBLIC_SHAPE.fullmatch(v):
        return False  # a key public by design (Stripe's publishable pk_…), whatever its name
    if not quoted and v[0] == "@" and _IDENT.fullmatch(v[1:]):
        return False  # password = @db_password (a Ruby instance variable, an SQL variable)
    if not quoted and v[0] in "[(":
        return False  # an expression
    if low.startswith(("your_", "your-", "<your", "os.getenv", "os.environ", "process.env", "getenv(", "env(",
                       "secrets.", "vars.", "replace_", "insert_")) or "placeholder" in low:
        return False
    if "://" in v or v.startswith("//") and "." in v:
        return False  # a URL (protocol-relative too): its userinfo and query are judged as URL parts
    if _PATH.fullmatch(v) and not any(len(seg) >= 16 and _looks_random(seg) for seg in v.split("/")):
        return False  # a file path (base64 may start with "/" too, but has + or = or a long random run)
    if not quoted and _IDENT.fullmatch(v):
        segs = low.split(".")
        if len(segs) > 1 and (segs[0] in _CODE_ROOTS or name_kind(segs[-1])
                              or segs[-1].startswith(_GETTERS) and not _looks_random(v.rsplit(".", 1)[-1])
                              or len(segs) >= 3 and v == low and not any(_looks_random(s) for s in segs)):
            return False  # config.api_key, process.env.X, random_password.db.result: a reference, not a value
        if low == name.lower().lstrip("-") or (name and low.endswith(name.lower().split("_")[-1])
                                                and "_" in low):
            return False  # api_key=api_key
        squashed = low.replace("_", "")
        if name and "_" in low and name.lower().replace("-", "").replace("_", "").endswith(squashed):
            return False  # "X-Api-Key": api_key (the variable named as the header)
    if v.replace(".", "", 1).isdigit():
        return len(v) >= (4 if kind == "password" else 12)
    if v[0] in "^~<>=v0123456789" and _VERSION.fullmatch(v):
        return False  # a version range ("next-auth": "^4.24.5")
    if kind == "random":  # not words joined by dots and dashes (routing_key='orders.created.eu-west-1')
        return len(v) >= 16 and _looks_random(v) and _WORDS_JOINED.fullmatch(v) is None
    return True


def _ldap_hash_b64(value: str) -> bool:
    """*value* is base64 of an LDAP password hash ({SSHA}…: what LDIF's userPassword:: holds)."""
    import base64
    import binascii

    if len(value) % 4 or len(value) > 512:
        return False
    try:
        plain = base64.b64decode(value, validate=True).decode("ascii")
    except (binascii.Error, ValueError):
        return False
    return _LDAP_HASH.fullmatch(plain) is not None


_WORDS_JOINED = re.compile(r"[a-z]{2,}(?:[._\-][a-z]{2,})*(?:[._\-][a-z0-9]{1,4})*")


# -- places ---------------------------------------------------------------------------------------
_USERINFO = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]{1,20}://(?P<user>[^\s/?#@:\"'\\<>]*(?:@[^\s/?#@:\"'\\<>]*)?)"
                       r"(?::(?P<pw>[^\s/?#\"'\\<>]*))?@")
_PEM_BEGIN = re.compile(r"(?P<dash>-----|---- )BEGIN (?P<kind>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)(?: ----|-----)")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_BODY = re.compile(r"(?:[A-Za-z0-9+/=\s:,.\-]|\\[nrt])*")
_BEARER = re.compile(r"(?i)\bbearer[ \t]+(?P<v>[A-Za-z0-9._~+/=\-]{16,})")
_CURL_USER = re.compile(r"(?:\s-u|--user|--proxy-user)[ \t=]+([\"']?)[^\s:\"']+:(?P<v>[^\s\"'@]+)\1")
# htpasswd -b[c…] FILE USER PASSWORD (-n: no file): the password is the last positional argument
_HTPASSWD = re.compile(r"\bhtpasswd(?:[ \t]+-[a-zA-Z]*b[a-zA-Z]*)(?:[ \t]+-[a-zA-Z]+)*[ \t]+(?:\S+[ \t]+)?\S+[ \t]+"
                       r"(?P<v>[^\s\"';|&<>]+)")
_MYSQL_P = re.compile(r"\b(?:mysql|mysqldump|mariadb|mysqladmin)\b[^\n]*?\s-p(?P<q>\\*[\"']?)(?P<v>[^\s\"']+)(?P=q)")
_SSHPASS = re.compile(r"\b(?:sshpass\s+-p|redis-cli\b[^\n]*?\s-a|(?:docker|podman|nerdctl|skopeo|helm registry|oc)"
                      r"\s+login\b[^\n]*?\s-p)\s*([\"']?)(?P<v>[^\s\"']+)\1")
# -u USER … -p V (--user, --username) in one command: twine, cf, az, mongosh …; the value must look like a credential
# (docker run -u 1000 -p 8080:80 publishes a port; python -u app.py -p config/x.yaml names a file)
_USER_THEN_P = re.compile(r"(?<!\S)(?:-u|--user(?:name)?)(?:[ \t]+|=)(?P<u>[^\s\-][^\s]*)"
                          r"(?:[ \t]+[^\s|;&]+){0,16}?[ \t]+-p"
                          r"(?:[ \t]+(?P<q>\\*[\"']?)|(?=\\*[\"'])(?P<q2>\\*[\"']))"
                          r"(?P<v>[^\s\"'\-][^\s\"']*)(?:(?P=q)|(?P=q2))")
_PORTS = re.compile(r"[\d.:\[\]a-f]*\d(?:/(?:tcp|udp|sctp))?")
_NETRC = re.compile(r"\bmachine\s+\S+\s+login\s+\S+\s+password\s+(?P<v>\S+)")
_PHONE = re.compile(r"(?<![\w+])\+[1-9]\d{6,14}(?![A-Za-z0-9])")
# Wallet keys by their place (round 11, class J/K): a WIF after importprivkey, a BIP39 phrase after its name, a
# Hardhat/Foundry accounts list of 0x keys (a tx hash alone stays), a Solana keypair file (64 bytes as a JSON array)
_WIF = re.compile(r"\bimportprivkey[ \t]+" + r"(?P<q>\\*[\"']?)" + r"(?P<v>[5KLc9][1-9A-HJ-NP-Za-km-z]{50,51})(?P=q)")
_BIP39 = re.compile(r"(?i)\b(?:seed|recovery|mnemonic|secret|backup|wallet)[ \t]+(?:phrase|words)\b[^\n]{0,24}?"
                    r"(?:\bis\b|:|=|\bare\b)[ \t]*[\"'`]?(?P<v>[a-z]{3,8}(?:[ \t]+[a-z]{3,8}){11,23})\b")
_ACCOUNTS = re.compile(r"\baccounts\\*[\"']?[ \t]*[:=][ \t]*\[(?P<body>[^\]]{66,4000})\]")
_HEX_KEY_0X = re.compile(r"0x[0-9a-fA-F]{64}(?![0-9a-fA-F])")
_KEYPAIR = re.compile(r"\[(?P<v>[ \t]*\d{1,3}(?:[ \t]*,[ \t\r\n]*\d{1,3}){63})[ \t]*\]")


def _wallet_spans(text: str, low: str, spans: list[tuple[int, int]]) -> None:
    if "importprivkey" in low:
        spans.extend(m.span("v") for m in _WIF.finditer(text))
    if "phrase" in low or "words" in low:
        spans.extend(m.span("v") for m in _BIP39.finditer(text))
    if "accounts" in low:
        for m in _ACCOUNTS.finditer(text):
            at = m.start("body")
            spans.extend((at + k.start(), at + k.end()) for k in _HEX_KEY_0X.finditer(m.group("body")))
    if "solana" in low or "keypair" in low:
        spans.extend(m.span("v") for m in _KEYPAIR.finditer(text)
                     if all(int(n) < 256 for n in m.group("v").replace(" ", "").replace("\n", "").split(",")))


_SQL_SET_VALUE = re.compile(r"(?i)\bset[ \t]+(?:\w+\.)?value[ \t]*=[ \t]*'(?P<v>[^'\n]*)'[^;\n]*?\bwhere[ \t]+"
                            r"(?:\w+\.)?(?:name|key)[ \t]*=[ \t]*'(?P<n>[^'\n]{1,100})'")
_OAUTH_CODE = re.compile(r"[?&]code=(?P<v>[^&\s\"'#\\]{20,})")
_FORM = re.compile(r"[A-Za-z_][\w.\-]*=[^&\s]*(?:&[A-Za-z_][\w.\-]*=[^&\s]*)+")
_FORM_KEYS = {"access_token", "refresh_token", "id_token", "token", "api_key", "apikey", "client_secret", "password",
              "auth", "jwt", "session", "secret", "key", "code", "signature", "x-amz-signature"}

# PuTTY's .ppk: "Private-Lines: N" and N lines of base64, the private key
_PPK = re.compile(r"Private-Lines:[ \t]*(?P<n>\d{1,4})[ \t]*(?P<nl>\r?\n|\\+r?\\+n)")
_B64_LINE = re.compile(r"[A-Za-z0-9+/=]*")


def _ppk_spans(text: str, spans: list[tuple[int, int]]) -> None:
    for m in _PPK.finditer(text):
        newline = m.group("nl")
        pos = end = m.end()
        for _ in range(int(m.group("n"))):
            line = _B64_LINE.match(text, pos)
            if not line.group():
                break
            end = line.end()
            if not text.startswith(newline, end):
                break
            pos = end + len(newline)
        if end > m.end():
            spans.append((m.end(), end))


# GitLab's incoming-mail token inside an address (incoming+group-project-42-glimt-…-issue@…): 25 characters
_GLIMT = re.compile(r"(?<=[+\-])glimt-[0-9A-Za-z_\-]{25}(?![0-9A-Za-z_])")


# The secret key as the next argument after its access key id: NewStaticCredentialsProvider("AKIA…", "V", ""),
# new AWS.Credentials('AKIA…', 'V'), boto3.client(…, 'AKIA…', 'V'): the id is masked by its shape, the secret beside it
_AWS_BESIDE = re.compile(r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?P<q>\\*[\"'`])[ \t]*,\s{0,40}(?P=q)"
                         r"(?P<v>[A-Za-z0-9/+=_\-]{16,128})(?P=q)")


_BRAINTREE = re.compile(r"access_token\$(?:production|sandbox)\$[a-z0-9]{16}\$[a-f0-9]{32}")


def _shape_spans(text: str, spans: list[tuple[int, int]]) -> None:
    """Shapes, searched only inside runs of 20+ token characters (found on a byte translation)."""
    if "AKIA" in text or "ASIA" in text or "ABIA" in text or "ACCA" in text:
        spans.extend(m.span("v") for m in _AWS_BESIDE.finditer(text) if _looks_random(m.group("v")))
    if "glimt-" in text:
        spans.extend(m.span() for m in _GLIMT.finditer(text))
    if "access_token$" in text:  # Braintree's token: "$" splits the runs below
        spans.extend(m.span() for m in _BRAINTREE.finditer(text))
    raw = text.encode("utf-8", "surrogatepass")
    mapped = raw.translate(_RUN_TABLE)
    if _RUN_20 not in mapped:
        return
    runs = list(_RUN.finditer(mapped))
    ascii_text = len(raw) == len(text)
    for run in runs:
        start, end = run.span()
        if not raw[start:end].strip(_PLAIN) and not _HEX_SHAPES.search(raw, start, end):
            continue  # SHAs, digests, UUIDs, timestamps: only Firecrawl and Mailgun keys are hex alone
        if _ID_RUN.fullmatch(raw, start, end):
            continue  # a provider's call/message id
        if not ascii_text:  # byte offsets to character offsets
            start = len(raw[:start].decode("utf-8", "surrogatepass"))
            end = start + len(raw[run.start():end].decode("utf-8", "surrogatepass"))
        for m in _SHAPES.finditer(text, start, end):
            token = m.group()
            if token.startswith(_LOOSE_PREFIXES) and not _random_body(token):
                continue
            lo = m.start()
            if token.startswith("eyJ") and (text.endswith("base64,", 0, lo) or text.endswith("pk.", 0, lo)):
                continue  # a data: URI's content (an inline source map), a Mapbox public pk. token
            if token.startswith(("hooks.", "discord")):  # keep the host and route, mask the path
                lo += token.index("/", token.index("/") + 1) + 1
            spans.append((lo, m.end()))


def _name_spans(text: str, low: str, words: list[str], spans: list[tuple[int, int]]) -> None:
    """``NAME=value`` and its kin, found from each keyword that a separator follows.

    One search per keyword present, each starting with its literal (SRE's fast literal search), so
    a keyword in prose with no separator after it ("the key issue") never reaches Python.
    """
    same = len(low) == len(text)  # a few characters change length when lower-cased
    found = []
    for word in words:
        found.extend((_KW_SEP if same else _KW_SEP_ANYCASE)[word].finditer(low if same else text))
    if "--" in text and same:
        found.extend(m for m in _CLI_NAME.finditer(low) if not m.start() or low[m.start() - 1] not in _NAME_CHARS)
    if " -" in text and same:
        found.extend(_CLI_SHORT.finditer(text))
    seen = set()
    for m in found:
        done = m.end("n")
        if done in seen:
            continue  # auth_token=: found from "auth" and from "token"
        seen.add(done)
        pos = m.end()
        cli = m.re is _CLI_NAME or m.re is _CLI_SHORT
        start = m.start("n") if cli else m.start()
        # back to the start of the name (a reversed window, so the scan runs in C)
        start -= _NAME_BACK.match(text[max(0, start - 80):start][::-1]).end()
        while start < done and not (text[start].isalpha() or text[start] == "_"):
            start += 1  # names start with a letter or _
        name = text[start:done]
        kind = name_kind(name)
        if kind == "random" and start >= 2 and text[start - 1] == " " and \
                text[max(0, start - 20):start - 1].rsplit(None, 1)[-1:] in (["public"], ["Public"], ["host"]):
            continue  # WireGuard's "public key: …", ssh's "host key": a public key
        if kind is None:
            # a list, a map or a section named as secrets (api_keys:, passwords = [...]): the values in it
            if not cli and container_kind(name) is not None and _form(m) == "assign":
                _container_spans(text, start, pos, spans)
            continue  # most names found: token_count, MAX_TOKENS, keyboard ...
        form = "cli" if cli else _form(m)
        if start and text[start - 1] == "$" and form != "assign":
            continue  # $API_KEY: a variable, not an assignment ($password = '…' is one)
        if start and text[start - 1] == ":" and _ARN.search(text, max(0, start - 120), start):
            continue  # arn:aws:secretsmanager:…:secret:prod/db-password: an ARN names a secret, it holds none
        if start and text[start - 1] == "!" and form == "space":
            continue  # !secret db_password: a YAML tag and its argument
        if start >= 2 and text[start - 2:start] == "${" and text[pos:pos + 1] == "?":
            continue  # ${DB_PASSWORD:?unset}: the shell's error message for an unset variable, not a value
        if form == "prose":
            spaced = _SPACED_GROUPS.match(text, pos)
            if spaced is not None and kind == "password":
                spans.append(spaced.span())
                continue
            v = _PROSE_VALUE.match(text, pos)
            if v and kind in ("password", "token") and _value_is_secret(v.group(), kind, False, name) \
                    and _looks_random(v.group()) | any(c in "!#$%^&*_-+=~.@?" for c in v.group()[1:]):
                spans.append(v.span())
            continue
        if form == "xml":
            _xml_span(text, start, pos, name, kind, spans)
            continue
        if kind in ("auth", "line"):
            if form in ("assign", "cli") or form == "space" and text[pos:pos + 1] in ("\"", "'"):
                _header_span(text, pos, kind, spans)
            continue
        if form == "assign" and text.startswith(("**", "__"), pos) and text[pos + 2:pos + 3] in (" ", "\t"):
            pos += 2 + len(text[pos + 2:pos + 40]) - len(text[pos + 2:pos + 40].lstrip(" \t"))  # **Password:** V
            if pos >= len(text):
                continue
        if text[pos] in "|>\r\n" and form == "assign" and text[m.end("n"):pos].strip(" \t\r\n\"'\\]").startswith(":"):
            _yaml_block_span(text, start, pos, name, kind, spans)
            continue
        if form == "assign" and text[pos] in "[{" and container_kind(name) is not None:
            found = len(spans)
            _container_spans(text, start, pos, spans)  # secrets = ["…", "…"], {prod: "…"}
            if len(spans) > found:
                continue  # else a value of its own ({…}: ODBC's PWD={…})
        if form == "assign" and text.startswith("<<", pos) and not text.startswith("<<<", pos):
            doc = _HEREDOC.match(text, pos)  # PASSWORD = <<~EOS … EOS: the lines between, each line's text
            if doc is not None:
                body = doc.group("body")
                if _value_is_secret(body, kind, True, name):
                    at = doc.start("body")
                    for line in body.split("\n"):
                        if line.strip():
                            lo = at + len(line) - len(line.lstrip())
                            spans.append((lo, at + len(line.rstrip())))
                        at += len(line) + 1
            continue
        if text.startswith("!!", pos):  # a YAML core tag before the value (password: !!str V, !!binary V)
            tag = _YAML_TAG.match(text, pos)
            after = _TAGGED.match(text, tag.end()) if tag else None
            if after is None:
                continue
            pos = after.end() - 1
        if form == "assign" and text[pos] in "(\"'":
            chain = _literal_chain(text, pos)
            if chain is not None:  # TOKEN = ("ghp_…"\n "…"), apiKey = "…" +\n "…"
                if _value_is_secret("".join(text[a:b] for a, b in chain), kind, True, name):
                    spans.extend(part for part in chain if part[1] > part[0])
                continue
        v = _VALUE.match(text, pos)
        if v is None:
            continue
        group = v.lastgroup
        value = v.group(group)
        sep = m.groupdict().get("sep")
        if sep and "=" in sep and sep.lstrip().startswith(":") and _DIGEST.fullmatch(sep.strip(" \t:=") + "=" + value):
            continue  # X-Hub-Signature-256: sha256=<hex> (round 12): a digest after its algorithm, not a typed name
        if group == "uq" and (text[v.end():v.end() + 1] in ("(", "[") or cli and value.startswith("-")
                              or text.startswith("<", v.end()) and _GENERIC_CALL.match(text, v.end())):
            continue  # a call (findViewById<EditText>(…) too) or subscript: code, not a value; or the next flag
        if cli and value.lower().startswith(("pass:", "env:", "file:", "fd:", "stdin")):
            if not value.lower().startswith("pass:"):
                continue  # openssl -passin env:VAR, file:path: where the password is, not the password
            if _value_is_secret(value[5:], kind, True, name):
                spans.append((v.start(group) + 5, v.end(group)))
            continue
        if group == "uq" and value.startswith("!") and _YAML_TAG.fullmatch(value) and _TAGGED.match(text, v.end()):
            continue  # password: !vault | (Ansible), password: !secret db_password (Home Assistant)
        if form != "assign" and form != "cli":
            # weaker evidence (a comma, a call, a space): only a value that looks like a credential
            if form in ("comma", "call") and (group == "uq" or not m.group("q") and form == "comma"):
                continue
            if form == "call" and (name.lower().startswith(_GETTERS) or not _CALL_END.match(text, v.end())):
                continue
            if not _strong(value.rstrip(".,;:!?)") if form == "space" else value):
                continue  # "the X-Api-Key header.": a word ending a sentence
        if group == "uq" and len(value) == 4:
            spaced = _SPACED_GROUPS.match(text, v.start(group))
            if spaced is not None and _value_is_secret(value, kind, False, name):
                spans.append(spaced.span())  # a Gmail app password, four groups of four letters: all of it
                continue
        if group in ("tq", "tsq"):  # a multi-line string: its content, not the line ends around it
            lo, hi = v.span(group)
            lo += len(value) - len(value.lstrip())
            hi -= len(value) - len(value.rstrip())
            if hi > lo and _value_is_secret(value, kind, True, name):
                spans.append((lo, hi))
            continue
        if kind in ("token", "random") and group != "uq" and " " in value \
                and value.split(" ", 1)[0].lower() in _SCHEMES:
            # "Authorization"-like value under another name: keep the scheme word
            spans.append((v.start(group) + value.index(" ") + 1, v.end(group)))
            continue
        if _value_is_secret(value, kind, group != "uq", name):
            spans.append(v.span(group))


# A Gmail app password as Google shows it: four groups of four letters, spaced (one value, masked whole)
_SPACED_GROUPS = re.compile(r"[a-z]{4}(?:[ \u00a0][a-z]{4}){3}(?![\w\-])")
_HEREDOC = re.compile(r"<<[~\-]?(?P<q>[\"']?)(?P<tag>[A-Za-z_]\w{0,30})(?P=q)[^\n]*\n(?P<body>[\s\S]{0,4096}?)\n[ \t]*"
                      r"(?P=tag)\b")
_ARN = re.compile(r"\barn:[\w\-]+:[\w\-]+:[\w\-]*:\d*:$")
_GENERIC_CALL = re.compile(r"<[\w.,<>\[\] ?]{1,80}>[ \t]*\(")
_CALL_END = re.compile(r"[ \t]*\)")  # NAME("value") alone: the call's only argument
_GETTERS = ("get", "read", "load", "fetch", "has", "is", "prompt", "ask", "input", "check", "verify", "validate",
            "hash", "reset", "forgot", "change", "update", "delete", "remove", "clear", "require", "generate")


def _form(m: re.Match) -> str:
    """How a name found by _KW_SEP meets its value."""
    if m.group("prose") is not None:
        return "prose"
    if m.group("ws") is not None:
        return "space"
    for form in ("comma", "xml", "call", "cell"):
        if m.group(form) is not None:
            return form
    return "assign"


def _strong(value: str) -> bool:
    """A value that looks like a credential on its own: no spaces, and digits, symbols, mixed case or length."""
    v = value.strip()
    if len(v) < 6 or " " in v or MASK in v:
        return False
    return (any(c.isdigit() for c in v) or any(c in "!#$%^&*+=~@?/_-." for c in v) or len(v) >= 16
            or (any(c.isupper() for c in v[1:]) and any(c.islower() for c in v)))


_XML_TEXT = re.compile(r"[^<]*")
_XML_OPEN = re.compile(r"(?::[\w.\-]*)?<")  # reversed: "<" or "<ns:" before the name


def _xml_span(text: str, start: int, pos: int, name: str, kind: str, spans: list[tuple[int, int]]) -> None:
    """<password>VALUE</password>: the element's text, when the element opens at the name."""
    if not _XML_OPEN.match(text[max(0, start - 40):start][::-1]):
        return
    if text.startswith("<![CDATA[", pos):  # <password><![CDATA[VALUE]]></password>
        end = text.find("]]>", pos + 9)
        if end > pos + 9 and _value_is_secret(text[pos + 9:end], kind, True, name):
            spans.append((pos + 9, end))
        return
    v = _XML_TEXT.match(text, pos)
    body = v.group()
    if not text.startswith("</", v.end()) or not body.strip():
        return
    lo = pos + len(body) - len(body.lstrip())
    hi = v.end() - (len(body) - len(body.rstrip()))
    if kind in ("auth", "line"):
        first, _, rest = body.strip().partition(" ")
        if first.lower() in _SCHEMES and rest.strip():
            lo = hi - len(rest.strip())
    elif not _value_is_secret(text[lo:hi], kind, True, name) or kind == "random" and not any(
            c.isdigit() for c in text[lo:hi]):
        return  # <key>CFBundleIdentifier</key> names a key, it holds none
    spans.append((lo, hi))


def _yaml_block_span(text: str, start: int, pos: int, name: str, kind: str, spans: list[tuple[int, int]]) -> None:
    """``password: |`` (or ``>``, or nothing) and the value on the lines below, indented deeper than the name."""
    line_start = text.rfind("\n", 0, start) + 1
    indent = start - line_start
    nl = text.find("\n", pos)
    if nl < 0:
        return
    head = text[pos:nl].strip()
    block = head[:1] in ("|", ">")
    if head and not block:
        return
    lo = hi = None
    at = nl + 1
    while at < len(text):
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        line = text[at:end]
        content = line.lstrip(" \t")
        if content.strip():
            if len(line) - len(content) <= indent:
                break
            if lo is None:
                if not block and (_YAML_KEY.match(content) or content.startswith(("- ", "#"))):
                    if container_kind(name) is not None:
                        _container_spans(text, start, pos, spans)  # secrets:\n  stripe: V, passwords:\n  - V
                    return  # a nested mapping or a list: its own names decide the rest
                lo = at + len(line) - len(content)
            hi = at + len(line.rstrip())
            if not block:
                break  # a plain scalar on the next line
        at = end + 1
    if lo is None or hi <= lo:
        return
    value = text[lo:hi]
    if block or _value_is_secret(value, kind, False, name):
        spans.append((lo, hi))


_YAML_TAG = re.compile(r"!!?[A-Za-z][A-Za-z_.:/\-]*")  # !vault, !secret, !Ref, !!binary (a password has digits)
_XML_KEY_PAIR = re.compile(r"(?i)<(?P<t>key|name)>[ \t]*(?P<n>[\w.\- ]{1,100}?)[ \t]*</(?P=t)>\s*"
                           r"<(?:string|value|data)\b[^>\n]{0,80}>[ \t]*"
                           r"(?P<v>[^<\s][^<\n]{0,400}?)[ \t]*</")
_TAGGED = re.compile(r"[ \t]+[^\s#]")  # a tag is followed by what it tags
_YAML_KEY = re.compile(r"[\w.\-\"']+[ \t]*:(?:[ \t]|$)")


_SCHEME_WORD = re.compile(r"[A-Z][A-Za-z]{1,23}(?:-[A-Za-z]{1,12}){0,3}")


def _scheme_word(word: str) -> bool:
    """Any vendor's scheme word before the credential (round 11: Opsgenie's GenieKey, Splunk's Splunk,
    Klaviyo-API-Key ...): a capitalised word of at most four parts, each a word or an acronym (not AbCdEf)."""
    if _SCHEME_WORD.fullmatch(word) is None:
        return False
    parts = _PARTS.findall(word)
    return len(parts) <= 4 and all(len(p) >= 3 or p.isupper() for p in parts)


def _header_span(text: str, pos: int, kind: str, spans: list[tuple[int, int]]) -> None:
    """Authorization: keep the scheme word, mask the credential; Cookie: mask the whole value."""
    quoted = False
    if text.startswith('\\"', pos):
        quoted, pos = True, pos + 2
    elif text[pos:pos + 1] in ("\"", "'"):
        quoted, pos = True, pos + 1
    value = _LINE_VALUE.match(text, pos).group().rstrip()
    if not value.strip():
        return
    end = pos + len(value)
    if kind == "auth":
        first, _, rest = value.partition(" ")
        if first.lower() in _SCHEMES and not rest.strip():
            return  # "Bearer " + token: the scheme alone, the credential added by code
        if (first.lower() in _SCHEMES or _scheme_word(first)) and rest.strip():
            pos += len(first) + 1 + (len(rest) - len(rest.lstrip()))
            value = rest.strip()
        elif not quoted:
            end, value = pos + len(first), first  # one bare credential
        if not _value_is_secret(value.split(" ", 1)[0], "token", True):
            return
    if end > pos and MASK not in text[pos:end] and text[pos] not in "$<{":
        spans.append((pos, end))


def _place_spans(text: str, low: str, words: list[str], spans: list[tuple[int, int]]) -> None:
    """Secrets found by where they stand: URL userinfo, key block bodies, bare bearer tokens,
    command-line passwords, .netrc, phone numbers, form bodies (Hermes's keys)."""
    can = place_rules(text)  # which of the costlier rules can match (all of them for a text that is not ASCII)
    if "@" in text and "://" in text:
        for m in _USERINFO.finditer(text):
            pw = m.group("pw")
            if pw is not None:
                if pw and pw[0] not in "{$<*" and MASK not in pw:
                    spans.append(m.span("pw"))
            elif len(m.group("user")) >= 8 and (_looks_random(m.group("user")) or len(m.group("user")) >= 20):
                spans.append(m.span("user"))  # https://TOKEN@host
    if "key" in words and "PRIVATE KEY" in text:
        for m in _PEM_BEGIN.finditer(text):
            end_marker = text.find(f"-----END {m.group('kind')}-----" if m.group("dash") == "-----"
                                   else f"---- END {m.group('kind')} ----", m.end())  # PEM, or SSH2 (RFC 4716)
            end = end_marker if end_marker >= 0 else _PEM_BODY.match(text, m.end()).end()
            if end > m.end():
                spans.append((m.end(), end))
        if "-----END" in text:
            for m in _PEM_END.finditer(text):
                if _PEM_BEGIN.search(text, max(0, m.start() - 20000), m.start()) is None:
                    lo = m.start()
                    while True:  # back over whole lines of base64
                        prev = text.rfind("\n", 0, max(lo - 1, 0))
                        line = text[prev + 1:lo].rstrip("\r\n")
                        if lo == 0 or len(line) < 16 or not _B64_LINE.fullmatch(line):
                            break
                        lo = prev + 1
                    if lo < m.start():
                        spans.append((lo, m.start()))
    if "Private-Lines" in text:
        _ppk_spans(text, spans)
    if "bearer" in low:
        spans.extend(m.span("v") for m in _BEARER.finditer(text) if MASK not in m.group("v"))
    if " -" in text:  # command-line flags
        if ":" in text and ("-u" in text or "--user" in text or "--proxy-user" in text):
            spans.extend(m.span("v") for m in _CURL_USER.finditer(text))
        if "-p" in text and ("mysql" in low or "mariadb" in low):
            spans.extend(m.span("v") for m in _MYSQL_P.finditer(text))
        if "sshpass" in text or "redis-cli" in text or "login" in text:
            spans.extend(m.span("v") for m in _SSHPASS.finditer(text))
        if "-p" in text and ("-u" in text or "--user" in text):
            for m in _USER_THEN_P.finditer(text):
                v = m.group("v")
                if _strong(v) and not _PORTS.fullmatch(v) and (_looks_random(v) or any(c in _SYMBOLS for c in v)) \
                        and _value_is_secret(v, "password", True):
                    spans.append(m.span("v"))
    if "htpasswd" in text:
        spans.extend(m.span("v") for m in _HTPASSWD.finditer(text) if _value_is_secret(m.group("v"), "password", True))
    if "machine" in text:
        spans.extend(m.span("v") for m in _NETRC.finditer(text))
    if "+" in text:
        spans.extend(m.span() for m in _PHONE.finditer(text))
    if "(" in text and _CRED_CALL_HINT.search(low):
        _cred_call_spans(text, spans)
    if "(" in text and ("," in text or "connect" in text):
        _positional_spans(text, spans)
    if "apart_hint" in can if text.isascii() else _APART_HINT.search(text):
        _apart_spans(text, spans)
    if "(" in text:
        if "secret_arg" in can:
            _secret_arg_spans(text, spans)
        if ":" in text and "basic_encode" in can:
            spans.extend(m.span("v") for m in _BASIC_ENCODE.finditer(text)
                          if _value_is_secret(m.group("v"), "password", True))
    # set("…", forKey: "password") (Swift), setObject:@"…" forKey:@"authToken" (Objective-C), forHTTPHeaderField:
    if "key:" in low or "headerfield:" in low:
        for m in _FOR_KEY.finditer(text):
            name = m.group("n") or m.group("n2")  # forKey: Keys.apiToken: the constant's last part
            kind = name_kind(name)
            if kind is not None and _value_is_secret(m.group("v"), kind, True, name):
                spans.append(m.span("v"))
    if "::add-mask::" in text:  # GitHub Actions: the value a workflow asks to mask is a secret by its place
        spans.extend(m.span("v") for m in _ADD_MASK.finditer(text) if _value_is_secret(m.group("v"), "password", True))
    if "get;" in text:
        for m in _CS_PROPERTY.finditer(text):
            kind = name_kind(m.group("n"))
            if kind is not None and _value_is_secret(m.group("v"), kind, True, m.group("n")):
                spans.append(m.span("v"))
    if "(" in text and ("client" in low or "api" in low or "search" in low):
        for call in _CLIENT_CALL.finditer(text):
            for a in _QUOTED_ARG.finditer(text, call.start("args"), call.end("args")):
                v = a.group("v")
                if _CLIENT_KEY.fullmatch(v) and not _UUID.fullmatch(v) and not _ID_RUN.fullmatch(v.encode()) and (
                        _HEX_KEY.fullmatch(v) or v.upper() != v and v.lower() != v and any(c.isdigit() for c in v)):
                    spans.append(a.span("v"))
    if ("\n" in text or text.count(":") >= 4) and "pgpass" in can:
        spans.extend(m.span("v") for m in _PGPASS.finditer(text) if _value_is_secret(m.group("v"), "password", True))
    if words and ("," in text or ";" in text or "\t" in text):
        _csv_spans(text, spans, can)
    if (words or "pat" in low) and "prose_colon" in can:
        spans.extend(m.span("v") for m in _PROSE_COLON.finditer(text)
                     if _strong(m.group("v")) and not m.group("v").startswith("!!")  # a YAML tag (!!binary V)
                     and _value_is_secret(m.group("v"), "password", False)
                     and _looks_random(m.group("v")) | any(c in "!#$%^&*_-+=~.@?" for c in m.group("v")[1:])
                     and "(" not in m.group("v") and not _ARN.search(text, max(0, m.start() - 120), m.start()))
    if "securestring" in low:
        spans.extend(m.span("v") for m in _SECURE_STRING.finditer(text))
    if "echo" in text and "|" in text:
        for m in _ECHO_PIPE.finditer(text):
            if _value_is_secret(m.group("v"), "password", True):
                spans.append(m.span("v"))
                at = m.end("v")  # echo -e "pw\npw" | passwd: the password typed twice
                for again in m.group("more").split("\\n")[1:]:
                    spans.append((at + 2, at + 2 + len(again)))
                    at += 2 + len(again)
    if "webhookb2" in text:
        spans.extend(m.span("v") for m in _TEAMS.finditer(text))
    _command_spans(text, low, spans, can)
    if "arg_hint" in can if text.isascii() else _ARG_HINT.search(low):
        _arg_spans(text, low, spans)
    if "\n" in text and ("[" in text or "cat" in text):
        _file_output_spans(text, spans)
    if "]" in text and ":" in text:
        spans.extend(m.span("v") for m in _SASL_PASSWD.finditer(text)
                     if _value_is_secret(m.group("v"), "password", True))
    if "codes" in low and "\n" in text:
        _code_spans(text, spans)
    if "|" in text and "---" in text and words:
        _table_spans(text, spans)
    if words and "grid" in can:
        _grid_spans(text, spans)
    if words and "aligned" in can:  # Secret ID    = V
        for m in _ALIGNED.finditer(text):
            name = m.group("n")
            kind = name_kind(name) if _ANY_TRIGGER.search(name.lower()) else None
            if kind is not None and kind not in ("auth", "line") and _value_is_secret(m.group("v"), kind, False, name):
                spans.append(m.span("v"))
    if "TRUE\t" in text or "FALSE\t" in text:  # cookies.txt: a session cookie is a credential (as Cookie: is)
        spans.extend(m.span("v") for m in _COOKIES_TXT.finditer(text)
                     if len(m.group("v")) >= 8 and _value_is_secret(m.group("v"), "token", True, m.group("n")))
    if words:
        if "/" in text and "creds_slash" in can:
            for m in _CREDS_SLASH.finditer(text):
                v = m.group("v").rstrip(".,;:!?)")
                if _strong(v) and _value_is_secret(v, "password", False) and "/" not in v:
                    spans.append((m.start("v"), m.start("v") + len(v)))
        for m in _PROSE_IS.finditer(text) if "prose_is" in can else ():
            g = "v" if m.group("v") is not None else "v2"
            v = m.group(g).rstrip(".,;:!?)")
            if _strong(v) and _value_is_secret(v, "password", False) and (
                    _looks_random(v) or any(c in "!#$%^&*_-+=~.@?" for c in v[1:])):
                spans.append((m.start(g), m.start(g) + len(v)))
    if not text.isascii() or "local_ascii" in can:
        for m in _LOCAL_PASSWORD.finditer(text):
            v = m.group("v").rstrip(".,;:!?)。、")
            if m.group("appo") is not None and (not _looks_random(v) or len(v) < 8 or _english_word(m) and not (
                    len(v) >= 10 and v.strip(_PLAIN_TEXT) and any(c.isupper() for c in v)
                    and any(c.islower() for c in v) and any(c.isdigit() for c in v))):
                continue  # "das Kennwort V genannt", "gave the password V": a value beside the word must look generated
            if _strong(v) and _value_is_secret(v, "password", False):
                spans.append((m.start("v"), m.start("v") + len(v)))
    if "insert" in low and "values" in low:
        _insert_spans(text, spans)
    if "identified" in low:
        spans.extend(m.span(m.lastgroup) for m in _SQL_IDENTIFIED.finditer(text)
                     if _value_is_secret(m.group(m.lastgroup), "password", m.lastgroup == "v"))
    if "\\u" in text or "\\x" in low:
        for m in _ESCAPED_RUN.finditer(text):
            plain = _ESCAPE.sub(lambda e: chr(int(e.group(1) or e.group(2), 16)), m.group())
            if plain != m.group() and find_secrets(plain):
                spans.append(m.span())
    if "importprivkey" in low or "phrase" in low or "words" in low or "accounts" in low or "solana" in low \
            or "keypair" in low:
        _wallet_spans(text, low, spans)
    if "where" in low and "value" in low:  # UPDATE settings SET value = 'V' WHERE name = 'smtp_password' (round 11)
        for m in _SQL_SET_VALUE.finditer(text):
            kind = name_kind(m.group("n"))
            if kind is not None and _value_is_secret(m.group("v"), kind, True, m.group("n")):
                spans.append(m.span("v"))
    if "code=" in text:  # an OAuth authorization code in a logged callback URL (round 11)
        spans.extend(m.span("v") for m in _OAUTH_CODE.finditer(text) if _looks_random(m.group("v")))
    if "&" in text and "\n" not in text:
        body = text.strip()
        if _FORM.fullmatch(body):
            offset = text.index(body)
            pos = 0
            for pair in body.split("&"):
                key, _, value = pair.partition("=")
                if key.lower() in _FORM_KEYS and value:
                    start = offset + pos + len(key) + 1
                    spans.append((start, start + len(value)))
                pos += len(pair) + 1


# NetworkCredential("user", "pw"), smtp.PlainAuth("", "user", "pw", "host"), keyring.set_password("svc", "user",
# "pw"), client.login("user", "pw"): the arguments that look like a password (not the first of several, not an
# address or a host name)
_CRED_CALL_HINT = re.compile(r"(?:credential|passwordauthentication|plainauth|basic_?auth|bearer_?auth|\bauth"
                             r"|set_?password|login"
                             r"|authenticate|pdo|mysqli(?:_connect)?|(?:change|update)user_?password|dbi->connect)"
                             r"[ \t]*\(")
_CRED_CALL = re.compile(r"(?i)(?:credentials?|passwordauthentication|plainauth|basic_?auth|bearer_?auth|\bauth"
                        r"|set_?password|login"
                        r"|authenticate|pdo|mysqli(?:_connect)?|(?:change|update)user_?password|dbi->connect)"
                        r"[ \t]*\((?P<args>(?:[^()\n]|\([^()\n]{0,200}\)){0,400})\)")  # Some("…") inside
# A value before the name it is stored under: keychain.set("…", forKey: "password"), [d setObject:@"…" forKey:@"token"]
_FOR_KEY = re.compile(r"@?(?P<q>\\*[\"'])(?P<v>[^\"'\n\\]+)(?P=q)[ \t]*,?[ \t]*(?:forKey|key|forHTTPHeaderField):[ \t]*"
                      r"(?:@?(?P<q2>\\*[\"'])(?P<n>[\w.\-]{1,100})(?P=q2)|[\w.]{0,100}?(?P<n2>\w{1,100})(?![\w.]))")
_ADD_MASK = re.compile(r"::add-mask::(?P<v>[^\s\"'\\]+)")
# C#: public string ClientSecret { get; set; } = "…";
_CS_PROPERTY = re.compile(r"(?P<n>[A-Za-z_]\w{0,100})[ \t]*\{[ \t]*get;[ \t]*"
                          r"(?:(?:(?:private|protected|internal)[ \t]+)?"
                          r"(?:set|init);[ \t]*)?\}[ \t]*=[ \t]*(?P<q>@?\\*\")(?P<v>[^\"\n\\]+)\\*\"")
# An SDK's client made with its key as a literal: DeepgramClient("…"), cohere.ClientV2("…"),
# meraki.DashboardAPI('…'), algoliasearch('APPID', '…'): an argument of 20 or more token characters that mixes
# letters and digits (not a UUID, a path or an address)
_CLIENT_CALL = re.compile(r"(?:Client(?:V\d+)?|API|Api|algoliasearch)[ \t]*"
                          r"\((?P<args>[^()\n]{0,300})\)")
_HEX_KEY = re.compile(r"(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{32,}")
_CLIENT_KEY = re.compile(r"[A-Za-z0-9_\-]{20,}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_QUOTED_ARG = re.compile(r"(\\*[\"'])(?P<v>[^\"'\n\\]*)\1")
_HOST = re.compile(r"[\w\-]+(?:\.[\w\-]+)*\.[a-z]{2,24}")


# Calls that take (host, [port,] user, password, …) by position: ftplib.FTP('host', 'user', 'V'), MySQLdb/pymysql
# connect('host', 'user', 'V', 'db'), paramiko's connect('host', 22, 'user', 'V'): a quoted argument from the third on
# that looks like a credential (not a host, an address, a path or a word)
_POSITIONAL_CALL = re.compile(r"(?:\bconnect|\bFTP(?:_TLS)?|\bSMTP(?:_SSL)?)[ \t]*"
                              r"\((?P<args>[ \t]*\\*[\"'][^()\n]{0,400})\)"
                              # any call whose first argument is a host: pysftp.Connection('h', 'u', 'V'),
                              # Net::FTP.new('h', 'u', 'V')
                              r"|\((?P<hargs>[ \t]*(?P<q>\\*[\"'])(?:localhost|\d{1,3}(?:\.\d{1,3}){3}"
                              r"|[\w\-]+(?:\.[\w\-]+)*\.[a-z]{2,24})(?P=q)[ \t]*,[^()\n]{0,400})\)")


def _positional_spans(text: str, spans: list[tuple[int, int]]) -> None:
    for call in _POSITIONAL_CALL.finditer(text):
        g = "args" if call.group("args") is not None else "hargs"
        at, index = call.start(g), 0
        for a in _QUOTED_ARG.finditer(text, call.start(g), call.end(g)):
            index += text.count(",", at, a.start())
            at = a.end()
            v = a.group("v")
            if index >= 2 and _strong(v) and "@" not in v and "://" not in v and not _HOST.fullmatch(v) and (
                    _looks_random(v) or any(c in _SYMBOLS for c in v)) and _value_is_secret(v, "password", True):
                spans.append(a.span("v"))


# Well-known calls that take a secret by position (the index of the argument): a JWT's signing key, an HMAC's or a
# cipher's key, a Wi-Fi password, an LDAP bind's password, a database's password after its user, an HTTP realm's
# password. Arguments are split at the commas outside brackets and quotes, so jwt.sign({ sub: id }, 'V', {…}) counts.
_SECRET_ARG_CALLS: list[tuple[str, int]] = [
    (r"\b(?:jwt|JWT|jose\.jwt|Jwt)\.(?:encode|sign|verify|decode)", 1), (r"\b(?:hmac|HMAC)\.new", 0),
    (r"\bcreateHmac", 1), (r"\bOpenSSL::HMAC\.(?:hexdigest|digest|base64digest)", 1), (r"\bhash_hmac", 2),
    (r"\bFernet", 0), (r"\b(?:AES|DES3|ChaCha20(?:_Poly1305)?|Blowfish)\.new", 0), (r"\bSecretKeySpec", 0),
    (r"\bWiFi\.begin", 1), (r"\b(?:simple_bind_s|simple_bind|bind_s)", 1), (r"\bSequelize", 2),
    (r"->credentials", 3), (r"(?<![\w.])Credentials", 3), (r"PDO->__construct|\bnew[ \t]+PDO", 2),
]
_SECRET_ARG_CALL = re.compile("(?:" + "|".join(f"(?P<c{i}>{p})" for i, (p, _) in enumerate(_SECRET_ARG_CALLS))
                              + r")[ \t]*\(")
_LITERAL_ARG = re.compile(r"[ \t\r\n]*(?:new[ \t]+)?(?:[bBrRuU]{1,2})?(?P<q>\\*[\"'`])(?P<v>[^\"'`\n\\]{1,512})(?P=q)")
_OPENERS, _CLOSERS = "([{", ")]}"


def _call_args(text: str, pos: int, limit: int = 2000) -> list[int]:
    """The start of each argument of the call whose "(" is at *pos* (commas outside brackets and quotes)."""
    starts, depth, quote, at, end = [pos + 1], 0, "", pos + 1, min(len(text), pos + limit)
    while at < end:
        c = text[at]
        if quote:
            if c == "\\":
                at += 1
            elif c == quote:
                quote = ""
        elif c in "\"'`":
            quote = c
        elif c in _OPENERS:
            depth += 1
        elif c in _CLOSERS:
            if depth == 0:
                return starts
            depth -= 1
        elif c == "," and depth == 0:
            starts.append(at + 1)
        at += 1
    return starts


def _secret_arg_spans(text: str, spans: list[tuple[int, int]]) -> None:
    for call in _SECRET_ARG_CALL.finditer(text):
        index = _SECRET_ARG_CALLS[int(call.lastgroup[1:])][1]
        starts = _call_args(text, call.end() - 1)
        if index < len(starts):
            m = _LITERAL_ARG.match(text, starts[index])
            if m is not None and len(m.group("v")) >= 6 and _value_is_secret(m.group("v"), "password", True) \
                    and not _HOST.fullmatch(m.group("v")):
                spans.append(m.span("v"))


# user:password in plain text about to be base64-encoded for HTTP Basic: btoa('api:V'), Buffer.from(`u:V`),
# base64.b64encode(b"u:V"), Base64.strict_encode64("u:V"), []byte("u:V")
_BASIC_ENCODE = re.compile(r"(?:\bbtoa|\bBuffer\.from|b64encode|encodeToString|encode64|\bbase64_encode"
                           r"|EncodeToString)[ \t]*\((?:[ \t]*\[\]byte\()?[ \t]*[bBuU]?(?P<q>\\*[\"'`])"
                           r"[^:\"'`\s\\]{1,64}:(?P<v>[^\"'`\s\\]{1,256})(?P=q)")


# Values apart from their names (round 10): config('SECRET_KEY', default='V'), String.fromEnvironment('API_KEY',
# defaultValue: 'V'), ENV.fetch("SECRET_TOKEN") { "V" }; an Erlang tuple {password, "V"}; a table cell beside one that
# names it (<td>password</td><td>V</td>); a URL path segment after one (/apikey/V/); pydantic's input_value under
# the field's name; Spring's Property:/Value: lines; XML's <AdministratorPassword><Value>V</Value>; protocol lines
# (sentinel auth-pass NAME V, snmp-server community V, IMAP's LOGIN user V, NickServ IDENTIFY V, openssl -K hex)
_APART = re.compile(
    r"(?P<q0>\\*[\"'])(?P<n>[\w.\-]{1,100})(?P=q0)[ \t]*,[^()\n]{0,200}?\b(?:default|defaultValue|fallback)"
    r"[ \t]*[=:][ \t]*(?P<q>\\*[\"'])(?P<v>[^\"'\n\\]{1,512})(?P=q)"
    r"|fetch\([ \t]*(?P<q1>\\*[\"'])(?P<n1>[\w.\-]{1,100})(?P=q1)[ \t]*\)[ \t]*(?:\{|do\b)[ \t]*(?P<q2>\\*[\"'])"
    r"(?P<v1>[^\"'\n\\]{1,512})(?P=q2)"
    r"|\{[ \t]*(?P<n2>[a-z_]\w{0,60})[ \t]*,[ \t]*(?P<q3>\\*[\"'])(?P<v2>[^\"'\n\\]{1,512})(?P=q3)[ \t]*\}"
    r"|<t[dh][^>]{0,60}>[ \t]*(?P<n3>[\w.\- ]{1,60}?)[ \t]*</t[dh]>\s*<td[^>]{0,60}>[ \t]*(?P<v3>[^<\n]{1,200}?)"
    r"[ \t]*</td>"
    r"|/(?P<n4>(?i:api[_\-]?key|apikey|token|access[_\-]?token|secret|key))/(?P<v4>[A-Za-z0-9_\-.~+]{16,200})(?=[/?#\s\"']|$)"
    r"|(?m:^)(?P<n5>[\w.]{1,100})[ \t]*\r?\n[ \t]+[^\n]*?\binput_value=(?P<q5>[\"'])(?P<v5>[^\"'\n]{1,512})(?P=q5)"
    r"|Property:[ \t]*(?P<n6>[\w.\-\[\]]{1,200})[ \t]*\r?\n[ \t]*Value:[ \t]*(?P<q6>\"?)(?P<v6>[^\"\n]{1,512})(?P=q6)"
    r"|<(?P<n7>[\w:.\-]{0,60}(?i:password|passwd|secret|token|key))>[ \t\r\n]*<(?i:value)>(?P<v7>[^<\n]{1,512})</"
    r"|\bsentinel[ \t]+(?P<n8>auth-pass)[ \t]+\S+[ \t]+(?P<v8>[^\s\"']+)"
    r"|\bsnmp-server[ \t]+(?P<n9>community)[ \t]+(?P<v9>[^\s\"']+)"
    r"|(?m:^)[ \t]*[\w.*]{1,16}[ \t]+(?i:login)[ \t]+[^\s\"']+[ \t]+(?P<v10>[^\s\"']+)[ \t]*(?=\r?\n|$)"
    r"|(?i:nickserv)[ \t]+(?i:identify)[ \t]+(?P<v11>[^\s\"']+)(?:[ \t]+(?P<v13>[^\s\"']+))?"
    r"|\bopenssl[ \t][^\n]*?\s-K[ \t]+(?P<v12>[0-9a-fA-F]{16,128})\b")
_APART_HINT = re.compile(r"(?i)default|fallback|fetch\(|\{[ \t]*[a-z_]*(?:pass|secret|token|key|pwd|auth)|</t[dh]>"
                         r"|/(?:api[_\-]?key|token|access[_\-]?token|secret|key)/|input_value=|Property:|<value>"
                         r"|sentinel|snmp-server|login|nickserv|openssl")
_APART_NAMED = (("n", "v"), ("n1", "v1"), ("n2", "v2"), ("n3", "v3"), ("n4", "v4"), ("n5", "v5"), ("n6", "v6"),
                ("n7", "v7"), ("n8", "v8"), ("n9", "v9"), (None, "v10"), (None, "v11"), (None, "v12"), (None, "v13"))


def _apart_spans(text: str, spans: list[tuple[int, int]]) -> None:
    for m in _APART.finditer(text):
        for n, g in _APART_NAMED:
            if m.group(g) is None:
                continue
            v = m.group(g)
            if n is None:  # by its place alone: it must look like a credential
                if _strong(v) and (_looks_random(v) or any(c in _SYMBOLS for c in v)) \
                        and _value_is_secret(v, "password", True):
                    spans.append(m.span(g))
                continue  # NickServ IDENTIFY [account] password: either word may be the password
            name = m.group(n)
            kind = name_kind(name.rsplit(".", 1)[-1]) or name_kind(name)
            if name in ("auth-pass", "community"):
                kind = "password"
            if kind is not None and kind not in ("auth", "line") and _value_is_secret(v, kind, True, name) and (
                    n not in ("n3", "n4") or _strong(v) and (_looks_random(v) or any(c in _SYMBOLS for c in v))):
                spans.append(m.span(g))
            break


def _cred_call_spans(text: str, spans: list[tuple[int, int]]) -> None:
    for call in _CRED_CALL.finditer(text):
        args = list(_QUOTED_ARG.finditer(text, call.start("args"), call.end("args")))
        for n, a in enumerate(args):
            v = a.group("v")
            if (n == 0 and len(args) > 1) or not _strong(v) or "@" in v or "://" in v or _HOST.fullmatch(v):
                continue
            if _value_is_secret(v, "password", True):
                spans.append(a.span("v"))


# Command lines that take a password by position or by a flag of their own: plink/pscp -pw, ldapsearch -w,
# mongosh -p, smbclient -U user%pw, sqlplus user/pw@db, rabbitmqctl add_user NAME PW, Go's user:pw@tcp(host),
# MySQL's SET PASSWORD FOR … = '…', and "config set NAME VALUE" (aws, npm, yarn, pip, git …) under a secret name
_COMMANDS = re.compile(
    r"\b(?:plink|pscp|psftp)\b[^\n]*?\s-pw[ \t]+(?P<q1>[\"']?)(?P<v1>[^\s\"']+)(?P=q1)"
    r"|\bldap[a-z]{3,10}\b[^\n]*?\s-w[ \t]+(?P<q2>[\"']?)(?P<v2>[^\s\"']+)(?P=q2)"
    r"|\bmongo(?:sh|dump|restore|export|import|stat|top)?\b[^\n]*?\s-p[ \t]+(?P<q3>[\"']?)"
    r"(?P<v3>[^\s\"'-][^\s\"']*)(?P=q3)"
    r"|\b(?:smbclient|rpcclient|smbmap|smbget)\b[^\n]*?\s(?:-U|--user(?:=|[ \t]))[ \t]*(?P<q4>[\"']?)[^\s%\"']+%"
    r"(?P<v4>[^\s\"']+)(?P=q4)"
    r"|\b(?:sqlplus|rman|expdp|impdp|sqlldr)\b(?:[ \t]+-\S+)*(?:[ \t]+(?i:target|catalog|auxiliary|userid))?"
    r"(?:[ \t]*=[ \t]*|[ \t]+)[\"']?[\w$#]+/(?P<v5>[^\s@/\"']+)"
    r"(?=@|[\"']?(?:\s|$))"
    r"|\brabbitmqctl[ \t]+(?:add_user|change_password)[ \t]+\S+[ \t]+(?P<q6>[\"']?)(?P<v6>[^\s\"']+)(?P=q6)"
    r"|(?<![\w/])[\w.\-]+:(?P<v7>[^\s@\"'/:]+)@(?:tcp|unix|udp)\("
    r"|(?m:(?:^|>[ \t]?)AUTH[ \t]+(?:\S+[ \t]+)?(?P<v9>\S+)[ \t]*$)"  # redis: AUTH [user] password
    r"|\b(?:zip|zipcloak|unzip)\b[^\n]*?\s-P[ \t]+(?P<q10>[\"']?)(?P<v10>[^\s\"']+)(?P=q10)"
    r"|\b7z[ar]?\b[^\n]*?\s-p(?P<q11>[\"']?)(?P<v11>[^\s\"']+)(?P=q11)"
    r"|(?i:\bnet[ \t]+use\b)[^\n]*?[ \t](?P<v12>[^\s/\"'*][^\s/\"']*)[ \t]+/(?i:user|u):"
    r"|(?i:\bnet[ \t]+user[ \t]+)[^\s/\"']+[ \t]+(?P<q13>[\"']?)(?P<v13>[^\s/\"'*][^\s\"']*)(?P=q13)(?=[ \t]+/|[ \t]*$)"
    r"|\bexpect[ \t]+(?:-\S+[ \t]+)?[\"'{][^\"'}\n]*(?i:assword|passphrase|passcode|pin)[^\"'}\n]*[\"'}][ \t]*\r?\n"
    r"[ \t]*send[ \t]+(?:--[ \t]+)?[\"'{](?P<v14>[^\"'}\n\\]+)"
    r"|(?i:\bset[ \t]+password[ \t]+for[ \t]+\S+[ \t]*=[ \t]*(?:password[ \t]*\([ \t]*)?)"
    r"(?P<q8>[\"'])(?P<v8>[^\"'\n]+)(?P=q8)")
_CONFIG_SET = re.compile(r"(?i)\bconfig(?:ure)?(?::set|[ \t]+set)[ \t]+(?:-{1,2}[\w\-]+[ \t]+)*(?P<n>[\w.:/@\-]+)[ \t]+"
                         r"(?P<q>[\"']?)(?P<v>[^\s\"']+)(?P=q)")
_HTTPIE_QUERY = re.compile(r"\b(?:https?|xhs?)[ \t][^\n]*?(?<=[ \t])(?P<n>[\w\-]+)==(?P<v>[^\s\"'=][^\s\"']*)")
# a literal after || ?? or on a line that assigns a secret name: process.env.JWT_SECRET || 'dev-secret'
_FALLBACK = re.compile(r"(?:\|\||\?\?|[ \t]or)[ \t]*(\\*[\"'])(?P<v>[^\"'\n\\]+)\1")
_ASSIGNED = re.compile(r"([A-Za-z_][\w]*)[\"'\]]*[ \t]*(?::[^=\n]{1,40})?(?:=|:)(?!=)")
_COMMAND_VALUES = tuple(f"v{i}" for i in range(1, 15))
_CMD_HINT = re.compile(r"-pw|ldap|mongo|smb|rpcclient|sqlplus|rman|expdp|impdp|sqlldr|rabbitmqctl|@(?:tcp|unix|udp)\("
                       r"|zip|7z|net use|net user|send |set password")


def _command_spans(text: str, low: str, spans: list[tuple[int, int]], can: frozenset[str] | None = None) -> None:
    """*can*: :func:`place_rules` of *text*, when known."""
    if (_CMD_HINT.search(low) if can is None or not text.isascii() else "cmd_hint" in can) or "AUTH " in text:
        for m in _COMMANDS.finditer(text):
            g = next(k for k in _COMMAND_VALUES if m.group(k) is not None)
            if _value_is_secret(m.group(g), "password", True):
                spans.append(m.span(g))
    if "==" in text and ("http" in low or "xh " in low):
        for m in _HTTPIE_QUERY.finditer(text):  # http GET host/path api_key==VALUE (HTTPie's query item)
            kind = name_kind(m.group("n"))
            if kind is not None and _value_is_secret(m.group("v"), kind, False, m.group("n")):
                spans.append(m.span("v"))
    if "config" in low and "set" in low:
        for m in _CONFIG_SET.finditer(text):
            kind = name_kind(m.group("n").rsplit(":", 1)[-1].rsplit("/", 1)[-1]) or name_kind(m.group("n"))
            if kind is not None and _value_is_secret(m.group("v"), kind, bool(m.group("q")), m.group("n")):
                spans.append(m.span("v"))
    if "||" in text or "??" in text or " or " in text:
        for m in _FALLBACK.finditer(text):
            line = text[text.rfind("\n", 0, m.start()) + 1:m.start()]
            lhs = _ASSIGNED.match(line.strip().removeprefix("const ").removeprefix("let ").removeprefix("var ")
                                  .removeprefix("export "))
            if lhs and name_kind(lhs.group(1)) is not None and _value_is_secret(m.group("v"), "password", True):
                spans.append(m.span("v"))


# Command lines and config lines that carry a secret in a place of their own, by command: a flag of the
# command's own (mosquitto -P, openssl enc -k, rar -hp, ssh-keygen -N), a positional argument (cargo/vault/wandb
# login TOKEN, poetry config http-basic.R USER PASS, b2 authorize-account ID KEY, bundle config HOST CREDS), a
# value fed to a command that reads a password on stdin (echo/printf … | sudo -S, a here-string), a config
# keyword (snmpd's rocommunity), a connect string (oracle thin user/PASS@), an env name Bundler derives from a
# host (BUNDLE_GEMS__ACME__COM=user:pass), a query parameter of one service (Azure Functions' code=,
# OpenWeatherMap's appid= with its 32-character key). (hint in the lower-cased text, pattern with group v,
# positional: the value must look like a credential on its own, generated; "strong": only strong)
_Q = r"(?P<q>\\*[\"']?)"
_STDIN_READERS = (r"(?:--password-stdin|--passphrase-fd|--pass(?:word)?-?stdin|secret[ \t]+create|--stdin|chpasswd"
                  r"|\bpasswd\b|\bsudo\b[^\n|]*?[ \t]-[A-Za-z]*S\b|\bcryptsetup\b|\baz[ \t]+devops[ \t]+login\b"
                  r"|--with-token\b"
                  # round 11: commands that set a secret from their standard input
                  r"|gcloud[ \t]+secrets[ \t]+(?:versions[ \t]+add|create)|vercel[ \t]+env[ \t]+add"
                  r"|wrangler[ \t]+(?:pages[ \t]+)?secret[ \t]+put|netlify[ \t]+env:set|supabase[ \t]+secrets[ \t]+set"
                  r"|firebase[ \t]+functions:secrets:set)")
# round 11 (class A): a command that prints a secret, and its output in the same text (a pasted terminal, a tool
# that echoes its command): the next non-empty line (after the CLI's own warnings, "›"), when it looks like one
_PRINTERS = (r"gcloud[ \t]+secrets[ \t]+versions[ \t]+access|vault[ \t]+(?:kv[ \t]+get|read)[^\n]*?[ \t]-field[= ]"
             r"|op[ \t]+read|heroku[ \t]+config:get|heroku[ \t]+auth:token|terraform[ \t]+output[ \t]+-raw"
             r"|g?pass[ \t]+show|security[ \t]+find-(?:generic|internet)-password[^\n]*?[ \t]-w\b"
             r"|bw[ \t]+get[ \t]+password|az[ \t]+keyvault[ \t]+secret[ \t]+show[^\n]*?(?:-o|--output)[ \t]+tsv"
             r"|argocd[ \t]+admin[ \t]+initial-password|wg[ \t]+genkey|doppler[ \t]+secrets[ \t]+get[^\n]*?--plain"
             r"|aws[ \t]+secretsmanager[ \t]+get-secret-value[^\n]*?--output[ \t]+text")
_PRINTER_HINTS = ("versions access", "-field", "op read", "config:get", "auth:token", "output -raw", "pass show",
                  "-password", "bw get", "secret show", "genkey", "--plain", "get-secret-value")
_ARG_TABLE: tuple[tuple[tuple[str, ...], str, bool | str], ...] = (
    (("mosquitto",), r"\bmosquitto_(?:pub|sub|rr)\b[^\n]*?\s-P[ \t]+" + _Q + r"(?P<v>[^\s\"']+)(?P=q)", False),
    (("openssl",), r"\bopenssl[ \t]+(?:enc|aes\S*|des\S*|bf\S*|camellia\S*|chacha\S*|rc4\S*)\b[^\n]*?\s-k[ \t]+" + _Q
     + r"(?P<v>[^\s\"']+)(?P=q)", False),
    (("rar",), r"\b(?:rar|unrar|winrar)[ \t][^\n]*?\s-h?p(?P<v>[^\s\"'\-][^\s\"']*)", False),
    (("ssh-keygen",), r"\bssh-keygen\b[^\n]*?\s-N[ \t]+" + _Q + r"(?P<v>[^\s\"']+)(?P=q)", False),
    (("ssh-keygen",), r"\bssh-keygen\b[^\n]*?\s-P[ \t]+" + _Q + r"(?P<v>[^\s\"']+)(?P=q)", False),
    (("login",), r"\b(?:cargo|vault|bao|wandb|doctl[ \t]+auth)[ \t]+login[ \t]+(?:-[\w\-]+(?:=\S*)?[ \t]+)*" + _Q
     + r"(?P<v>[^\s\"'\-=][^\s\"'=]*)(?P=q)(?=[ \t]*(?:$|[\r\n;&|#\"]))", True),
    (("poetry",), r"\bpoetry[ \t]+config[ \t]+(?:--\S+[ \t]+)*(?:http-basic\.\S+[ \t]+\S+|pypi-token\.\S+)[ \t]+" + _Q
     + r"(?P<v>[^\s\"']+)(?P=q)", False),
    (("b2",), r"\bb2[ \t]+(?:account[ \t]+authorize|authorize[-_]account)[ \t]+(?:-\S+[ \t]+)*\S+[ \t]+" + _Q
     + r"(?P<v>[^\s\"'\-][^\s\"']*)(?P=q)", False),
    (("bundle",), r"\bbundle[ \t]+config[ \t]+(?:set[ \t]+)?(?:--(?:global|local)[ \t]+)?(?:https?://)?[\w\-]+"
     r"(?:\.[\w\-]+)+/?[ \t]+" + _Q + r"(?P<v>[^\s\"']+)(?P=q)", True),
    (("bundle_",), r"\bBUNDLE_(?!BUILD__|MIRROR__)(?:[A-Z0-9\-]+__)+[A-Z0-9]+=" + _Q + r"(?P<v>[^\s\"']+)(?P=q)",
     False),
    (("oracle:",), r"jdbc:oracle:(?:thin|oci):[\w$#]+/(?P<v>[^@\s\"'/]+)@", False),
    (("community",), r"(?m)^[ \t]*(?:ro|rw)community6?[ \t]+" + _Q + r"(?P<v>[^\s\"']+)(?P=q)", False),
    (("azurewebsites",), r"\.azurewebsites\.net/api/[^\s?#\"']*\?(?:[^\s#\"']*?&)?code=(?P<v>[^&\s\"'#]+)", False),
    (("appid=",), r"[?&](?i:appid)=(?P<v>[a-z0-9]{32})(?![A-Za-z0-9_\-])", True),
    (("echo", "printf"), r"\b(?:echo|printf)[ \t]+(?:-[ne]+[ \t]+)?(?:\\*[\"']%s(?:\\+n)?\\*[\"'][ \t]+)?" + _Q
     + r"(?P<v>[^\s\"'|\\]+)(?P=q)[ \t]*\|[^\n|]*?"
     + _STDIN_READERS, False),
    # kubectl get secret … -o jsonpath='{.data.password}' (| base64 -d), then its output on the next line
    (("jsonpath",), r"\bkubectl[ \t]+get[ \t]+secrets?\b[^\n]*?jsonpath=[\"']?\{\.data\.[^}\n]+\}[^\n]*\r?\n"
     r"(?:[ \t]*\r?\n)?(?P<q>)(?P<v>[^\s$#>][^\s]*)[ \t]*(?:\r?\n|$)", False),
    # round 11 (class E): commands that set a secret given on their command line (class A: see _PRINTERS)
    (("ssm", "keyvault", "secretsmanager"), r"\b(?:aws[ \t]+ssm[ \t]+put-parameter"
     r"|az[ \t]+keyvault[ \t]+secret[ \t]+set"
     r"|aws[ \t]+secretsmanager[ \t]+(?:create-secret|put-secret-value|update-secret))\b[^\n]*?[ \t]"
     r"--(?:value|secret-string)(?:[ \t]+|=)" + _Q + r"(?P<v>[^\s\"']+)(?P=q)", "printed"),
    (("mc ",), r"\bmc[ \t]+admin[ \t]+user[ \t]+add[ \t]+\S+[ \t]+\S+[ \t]+" + _Q + r"(?P<v>[^\s\"'\-][^\s\"']*)(?P=q)",
     False),
    (_PRINTER_HINTS, r"(?<![\w\-])(?:" + _PRINTERS + r")[^\n]*\r?\n(?:[ \t]*(?:›[^\n]*)?\r?\n){0,4}(?P<q>)"
     r"(?P<v>[^\s$#>›][^\s]*)[ \t]*(?:\r?\n|$)", "printed"),
    # round 11 (cli-output): a secret printed under a label that names nothing secret on its own: Vault's unseal keys,
    # elasticsearch-reset-password's "New value:", redis-cli's CONFIG GET pair, etcdctl get's key line then its value
    (("unseal key",), r"(?m)^[ \t]*Unseal Key(?:[ \t]+\d{1,2})?:[ \t]*(?P<q>)(?P<v>\S+)", "printed"),
    (("new value:",), r"reset-password\b[^\n]*\r?\n(?:[^\n]*\r?\n){0,3}?[ \t]*New value:[ \t]*(?P<q>)(?P<v>\S+)",
     "printed"),
    (("config get",), r"(?i:config)[ \t]+(?i:get)[ \t]+[\"']?[\w\-]*(?i:pass|auth|secret|token|key)[\w\-]*[\"']?[^\n]*"
     r"\r?\n[ \t]*1\)[ \t]*\"[^\"\n]*\"[ \t]*\r?\n[ \t]*2\)[ \t]*(?P<q>\")(?P<v>[^\"\n]+)(?P=q)", "printed"),
    (("etcdctl",), r"\betcdctl[ \t]+get[ \t]+(?P<k>\S*(?i:pass|secret|token|key|cred)\S*)[^\n]*\r?\n(?P=k)[ \t]*\r?\n"
     r"(?P<q>)(?P<v>\S+)", "printed"),
    (("<<<",), r"(?m)^[^\n]*?" + _STDIN_READERS + r"[^\n]*?<<<[ \t]*" + _Q + r"(?P<v>[^\s\"'\\]+)(?P=q)", False),
    # round 8: MinIO's alias (NAME URL ACCESS_KEY SECRET_KEY: the last), openssl passwd's password, Cisco IOS's
    # cleartext (0) and reversible (7) passwords and keys (5, 8, 9 are hashes: left)
    (("mc ",), r"\bmc[ \t]+(?:alias[ \t]+set|config[ \t]+host[ \t]+add)[ \t]+\S+[ \t]+\S+[ \t]+\S+[ \t]+" + _Q
     + r"(?P<v>[^\s\"'\-][^\s\"']*)(?P=q)", False),
    (("passwd",), r"\bopenssl[ \t]+passwd\b(?:[ \t]+-(?:salt|in)[ \t]+\S+|[ \t]+-\S+)*[ \t]+" + _Q
     + r"(?P<v>[^\s\"'\-][^\s\"']*)(?P=q)", False),
    ((" 0 ", " 7 "), r"(?<![^\s])(?:password|secret|key|key-string|authentication-key)[ \t]+[07][ \t]+(?P<q>)"
     r"(?P<v>[^\s\"']+)", "strong"),  # strong: not "password 7 characters"
    *((hints, r"(?<![\w\-.])(?:" + command + r")(?:\.exe)?[ \t][^\n]*?(?<=[ \t])" + flag + _Q + user
       + r"(?P<v>[^\s\"'\-][^\s\"']*)(?P=q)", False)
      for hints, command, flags, user in (
          # a command's own password flags (case matters: sqlcmd -P is the password, -p prints statistics), what
          # comes before the password in the value (a user and its separator)
          (("cqlsh", "cbq"), r"cqlsh|cbq", (r"-p[ \t]+",), ""),
          (("sqlcmd", "bcp", "osql", "isql"), r"sqlcmd|bcp|osql|isql", (r"-P(?:[ \t]+|(?=[\"']))",), ""),
          (("influx",), r"influx", (r"-p[ \t]+",), ""),
          (("ipmitool",), r"ipmitool", (r"-P[ \t]+",), ""),
          (("psexec",), r"(?i:psexec(?:64)?)", (r"-p[ \t]+",), ""),
          (("snmp",), r"snmp[a-z]{3,12}", (r"-A[ \t]+", r"-X[ \t]+"), ""),
          (("ldappasswd",), r"ldappasswd", (r"-s[ \t]+", r"-a[ \t]+"), ""),
          (("nuget",), r"nuget", (r"-k[ \t]+", r"-(?i:apikey)[ \t]+"), ""),
          (("freerdp",), r"[xw]?freerdp3?|sdl-freerdp", (r"/p:",), ""),
          (("http", "xh"), r"https?|xhs?", (r"-a[ \t]+", r"--auth[ \t=]+"), r"[^\s:\"']*:"),
          (("lftp",), r"lftp", (r"-u[ \t]+",), r"[^\s,\"']+,"))
      for flag in flags),
    # round 9: gh secret set NAME --body V (-b V), macOS security add-generic-password … -w V
    (("gh ",), r"\bgh[ \t]+secret[ \t]+set\b[^\n]*?[ \t](?:--body|-b)(?:[ \t]+|=)" + _Q
     + r"(?P<v>[^\s\"'\-][^\s\"']*)(?P=q)", False),
    (("security",), r"\bsecurity[ \t]+add-(?:generic|internet)-password\b[^\n]*?[ \t]-w[ \t]+" + _Q
     + r"(?P<v>[^\s\"'\-][^\s\"']*)(?P=q)", False),
    (("nuget",), r"\bnuget(?:\.exe)?[ \t]+setapikey[ \t]+" + _Q + r"(?P<v>[^\s\"'\-][^\s\"']*)(?P=q)", False),
    (("wpa_passphrase",), r"\bwpa_passphrase[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|\S+)[ \t]+" + _Q
     + r"(?P<v>[^\s\"']+)(?P=q)", False),
    (("rman",), r"(?i:\b(?:catalog|auxiliary)\b)[ \t]*=?[ \t]*[\"']?[\w$#]+/(?P<q>)(?P<v>[^\s@/\"']+)"
     r"(?=@|[\"']?(?:\s|$))", False),
    # SNMPv3 users: Cisco's snmp-server user … auth sha V priv aes 128 V, net-snmp's createUser u SHA "V" AES "V"
    (("snmp-server",), r"\bsnmp-server[ \t]+user\b[^\n]*?[ \t]auth[ \t]+\S+[ \t]+" + _Q + r"(?P<v>[^\s\"']+)(?P=q)",
     False),
    (("snmp-server",), r"\bsnmp-server[ \t]+user\b[^\n]*?[ \t]priv[ \t]+\S+(?:[ \t]+\d{3})?[ \t]+" + _Q
     + r"(?P<v>[^\s\"']+)(?P=q)", False),
    (("createuser",), r"\bcreateUser[ \t]+\S+[ \t]+(?:MD5|SHA\S*)[ \t]+" + _Q + r"(?P<v>[^\s\"']+)(?P=q)", False),
    (("createuser",), r"\bcreateUser[ \t]+\S+[ \t]+(?:MD5|SHA\S*)[ \t]+\S+[ \t]+(?:DES|AES\S*)[ \t]+" + _Q
     + r"(?P<v>[^\s\"']+)(?P=q)", False),
)
_ARG_RULES = [(hints, re.compile(pattern), positional) for hints, pattern, positional in _ARG_TABLE]
# NAME <(echo VALUE): a value given as a file by process substitution (wg set … private-key <(echo …))
_PROCESS_SUBST = re.compile(r"(?P<n>[\w\-]+)(?:[ \t]+|=)<\([ \t]*(?:echo|printf)[ \t]+(?:-\w+[ \t]+)?" + _Q
                            + r"(?P<v>[^\s\"')]+)(?P=q)")
_FILE_SUFFIX = re.compile(r"[_\-](?:file|path)$", re.IGNORECASE)
# kubectl (oc) create secret generic NAME --from-literal=KEY=VALUE …: each literal's value
_SECRET_CREATE = re.compile(r"\b(?:kubectl|oc)\b[^\n]*?[ \t]create[ \t]+secret\b[^\n]*")
_FROM_LITERAL = re.compile(r"--from-literal[= \t]+(?P<q>[\"']?)(?P<n>[\w.\-]+)=(?P<v>[^\s\"']+)(?P=q)")
# echo VALUE > FILE, where the file's name says secret (config/master.key, .vault_pass, token.txt)
_ECHO_FILE = re.compile(r"\becho[ \t]+(?:-n[ \t]+)?" + _Q + r"(?P<v>[^\s\"'|>]+)(?P=q)[ \t]*>>?[ \t]*"
                        r"(?P<f>[^\s;&|]+)")


# [password] then the value alone on the next line (an ini section named as a secret); cat of a file named as one
# (cat /etc/openvpn/creds.txt, cat /run/secrets/db_password) and the bare lines it printed
_INI_SECTION = re.compile(r"(?m)^[ \t]*\[(?P<n>[\w.\- ]{1,60})\][ \t]*\r?\n[ \t]*(?P<v>[^\s=\[#;][^\s=]*)[ \t]*\r?$")
_CAT_FILE = re.compile(r"\bcat[ \t]+(?P<f>[^\s|;&<>]+)[ \t]*\r?\n(?P<out>(?:[^\n]*(?:\n|$)){1,5})")
_SECRET_FILE = re.compile(r"(?i)cred|pass|secret|token|api[_\-]?key")


# [secrets] (TOML, ini) then its lines: the values named harmlessly in a section named as secrets
_SECTION = re.compile(r"(?m)^[ \t]*\[(?P<n>[\w.\- ]{1,60})\][ \t]*\r?$")
# postfix's sasl_passwd: [host]:port user:PASSWORD
_SASL_PASSWD = re.compile(r"(?m)^[ \t]*\[[\w.\-]+\](?::[\w\-]{1,20})?[ \t]+[^\s:]+:(?P<v>[^\s:]+)[ \t]*\r?$")
# recovery (backup) codes under a heading that names them, one or two a line
_CODES_HEADING = re.compile(r"(?i)\b(?:recovery|backup)[ \t]+codes?\b[^\n]{0,80}\r?\n(?:[ \t]*\r?\n)?")
_CODE_LINE = re.compile(r"[ \t]*(?:[-*•]|\d{1,2}[.)])?[ \t]*(?P<c>[A-Za-z0-9]{4,12}(?:[- ][A-Za-z0-9]{4,12})?)"
                        r"(?:[ \t]+(?P<c2>[A-Za-z0-9]{4,12}(?:-[A-Za-z0-9]{4,12})?))?[ \t]*\r?$")


def _section_spans(text: str, spans: list[tuple[int, int]]) -> None:
    for m in _SECTION.finditer(text):
        kind = container_kind(m.group("n").strip().rsplit(".", 1)[-1])
        if kind is None:
            continue
        at = m.end() + 1
        while at < len(text):
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            if text[at:end].lstrip().startswith("["):
                break  # the next section
            item = _BLOCK_ITEM.match(text, at, end)
            if item is not None and item.group("k") is not None:
                _contained_item(item, kind, spans)
            at = end + 1


def _code_spans(text: str, spans: list[tuple[int, int]]) -> None:
    pos = 0
    while (m := _CODES_HEADING.search(text, pos)) is not None:
        found, digits, at = [], 0, m.end()
        while at < len(text) and len(found) < 64:
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            line = _CODE_LINE.match(text, at, end)
            if line is None:
                break
            codes = [line.span(g) for g in ("c", "c2") if line.group(g) is not None]
            found += codes
            digits += sum(any(c.isdigit() for c in text[a:b]) for a, b in codes)
            at = end + 1
        if len(found) >= 2 and 2 * digits >= len(found):  # codes, not a list of words
            spans.extend(found)
        pos = max(m.end(), at)  # the lines read are not read again


def _file_output_spans(text: str, spans: list[tuple[int, int]]) -> None:
    if "[" in text:
        for m in _INI_SECTION.finditer(text):
            kind = name_kind(m.group("n").strip())
            if kind is not None and _strong(m.group("v")) and _value_is_secret(m.group("v"), kind, False):
                spans.append(m.span("v"))
        _section_spans(text, spans)
    if "cat" in text:
        for m in _CAT_FILE.finditer(text):
            base = m.group("f").rsplit("/", 1)[-1]
            if not _SECRET_FILE.search(base) or base.endswith((".pub", ".crt", ".pem", ".key")):
                continue  # key files: the key block rules judge them
            pos = m.start("out")
            for line in m.group("out").split("\n"):
                word = line.strip()
                if not word or word.startswith(("$", "#", ">")) or " " in word:
                    break  # the next prompt, or a line of text: the file's output ended
                if _strong(word) and _value_is_secret(word, "password", False) and (
                        _looks_random(word) or any(c in "!#$%^&*_-+=~.@?" for c in word[1:])):
                    lo = pos + line.index(word)
                    spans.append((lo, lo + len(word)))
                pos += len(line) + 1


def _arg_spans(text: str, low: str, spans: list[tuple[int, int]]) -> None:
    for hints, regex, positional in _ARG_RULES:
        if any(h in low for h in hints):
            for m in regex.finditer(text):
                v = m.group("v")
                if positional == "printed":
                    if not _strong(v) or _WORDS_JOINED.fullmatch(v):
                        continue  # a word, a host, a bucket's name (terraform output -raw bucket_name)
                elif positional and not (_strong(v) and (positional == "strong" or _looks_random(v) or ":" in v)):
                    continue
                if _value_is_secret(v, "password", True):
                    spans.append(m.span("v"))
    if "--from-literal" in text:
        for line in _SECRET_CREATE.finditer(text):  # kubectl create secret …: every literal is the secret's
            for m in _FROM_LITERAL.finditer(text, line.start(), line.end()):
                v = m.group("v")
                if (name_kind(m.group("n")) is not None or _strong(v)) and _value_is_secret(v, "password", True):
                    spans.append(m.span("v"))
    if "<(" in text:
        for m in _PROCESS_SUBST.finditer(text):
            # --password-file <(echo V): the file named is the secret's (restic, borg, wg)
            kind = name_kind(m.group("n")) or name_kind(_FILE_SUFFIX.sub("", m.group("n")))
            if kind is not None and _value_is_secret(m.group("v"), kind, True, m.group("n")):
                spans.append(m.span("v"))
    if "echo" in low and ">" in text:
        for m in _ECHO_FILE.finditer(text):
            base = m.group("f").rsplit("/", 1)[-1]
            v = m.group("v")
            if (name_kind(base) is not None or base.endswith((".key", ".pem"))) and _strong(v) \
                    and _looks_random(v) and _value_is_secret(v, "password", True):
                spans.append(m.span("v"))


# INSERT INTO users (email, password) VALUES ('…', '…'): the values of the secret columns
_INSERT = re.compile(r"(?i)\binsert[ \t]+into[ \t]+[\w.\"`\[\]]+[ \t]*\((?P<cols>[^()\n]{1,400})\)\s*values\s*"
                     r"(?P<rows>\((?:[^()\n]|\([^()\n]*\)){1,2000}\)(?:\s*,\s*\((?:[^()\n]|\([^()\n]*\)){1,2000}\)){0,100})")
_SQL_ROW = re.compile(r"\((?P<vals>(?:[^()\n]|\([^()\n]*\)){1,2000})\)")
_SQL_VALUE = re.compile(r"\s*(?:'(?P<s>(?:[^'\\\n]|''|\\.)*)'|\"(?P<d>(?:[^\"\\\n]|\\.)*)\"|(?P<b>[^,]*))\s*(?:,|$)")


def _insert_spans(text: str, spans: list[tuple[int, int]]) -> None:
    for m in _INSERT.finditer(text):
        cols = [c.strip(" \t\"`[]") for c in m.group("cols").split(",")]
        secret = {i: name_kind(c) for i, c in enumerate(cols) if name_kind(c) is not None}
        if not secret:
            continue
        for row in _SQL_ROW.finditer(text, m.start("rows"), m.end("rows")):
            pos, end, i = row.start("vals"), row.end("vals"), 0
            while pos < end:
                v = _SQL_VALUE.match(text, pos, end)
                if v is None or v.end() == pos:
                    break
                g = v.lastgroup if v.lastgroup in ("s", "d") else None
                if i in secret and g is not None and _value_is_secret(v.group(g), secret[i], True, cols[i]):
                    spans.append(v.span(g))
                pos, i = v.end(), i + 1


# A Markdown table whose header names a secret column: that column's cells
_TABLE_HEAD = re.compile(r"(?m)^[ \t]*\|(?P<head>[^\n]*)\|[ \t]*\r?\n[ \t]*\|(?P<rule>[ \t:|\-]*)\|?[ \t]*\r?$")


def _table_spans(text: str, spans: list[tuple[int, int]]) -> None:
    for head in _TABLE_HEAD.finditer(text):
        names = [c.strip(" \t*`") for c in head.group("head").split("|")]
        secret = {i: name_kind(n) for i, n in enumerate(names) if n and name_kind(n) is not None}
        if not secret or "---" not in head.group("rule"):
            continue
        pos = head.end() + 1
        while pos < len(text):
            end = text.find("\n", pos)
            end = len(text) if end < 0 else end
            line = text[pos:end].rstrip("\r")
            if not line.lstrip().startswith("|"):
                break
            at = pos + line.index("|") + 1
            for i, cell in enumerate(line.strip()[1:].split("|")):
                value = cell.strip(" \t`")
                if i in secret and value and _value_is_secret(value, secret[i], True, names[i]):
                    lo = at + cell.index(value)
                    spans.append((lo, lo + len(value)))
                at += len(cell) + 1
            pos = end + 1


# Output tables (round 12, redact-hostile-4): psql's aligned and expanded (-[ RECORD 1 ]) forms, MySQL's +---+ boxes,
# box-drawing tables (doppler, railway, npm), whitespace-aligned CLI tables (doctl, az -o table, vault). One design: a
# table is found from a cell naming a secret (_GRID_NAME: bounded by a cell's edge, as the gate's _GATE_GRID), read
# up and down over the rows of its style (cells apart by bars, or by two spaces or a tab) and its rule lines; then a
# header whose cell names a secret masks the cells under it, a NAME/VALUE (KEY/VALUE) header masks the value beside
# each secret name, and a two-column table of bars without a header is a name/value table of its own.
_GRID_KW = "(?:" + "|".join(_NAME_TRIGGERS) + ")"
_GRID_PATTERN = (r"(?:[ \t]{2}|[\t|│║┃])[ \t]*[A-Za-z0-9_.\-]*" + _GRID_KW
                 + r"[A-Za-z0-9_.\-]*(?:[ \t]{2}|[ \t]*(?:[\t|│║┃]|\r?$))"
                 r"|^[ \t]?[A-Za-z0-9_.\-]*" + _GRID_KW + r"[A-Za-z0-9_.\-]*(?:[ \t]{2}|[ \t]*[\t|│║┃])")
_GRID_NAME = re.compile(_GRID_PATTERN, re.ASCII | re.IGNORECASE | re.MULTILINE)
_GRID_BARS = re.compile(r"[|│║┃]")
_GRID_WS_CELL = re.compile(r"[^\t ]+(?: [^\t ]+)*")  # whitespace tables: cells apart by two spaces or a tab
_GRID_RULE = frozenset("+-=:|─━┄┈═┼┬┴├┤┌┐└┘╔╗╚╝╠╣╦╩╬╤╧╪╫╞╡╟╢║│┃╭╮╯╰ \t")
_GRID_HEADER = re.compile(r"[A-Za-z_#][\w .\-/()#]{0,39}")
_GRID_NAMES = {"name", "key", "keyname", "variable", "var", "field", "setting", "parameter", "env", "secret"}
_GRID_VALUES = {"value", "values", "val"}


def _grid_rule(line: str) -> bool:
    s = line.strip()
    return len(s) >= 3 and all(c in _GRID_RULE for c in s) and sum(c in "-─━═=┄┈" for c in s) >= 3


def _grid_cells(text: str, lo: int, hi: int, bars: bool) -> list[tuple[int, int]] | None:
    """The cells of the line text[lo:hi] (their content, stripped), or None when it is no row of the style."""
    line = text[lo:hi].rstrip("\r")
    if not bars:
        cells = [(lo + m.start(), lo + m.end()) for m in _GRID_WS_CELL.finditer(line)]
        return cells if len(cells) >= 2 else None
    edges = [m.start() for m in _GRID_BARS.finditer(line)]
    if not edges:
        return None
    bounds = [-1, *edges, len(line)]
    cells = []
    for a, b in zip(bounds, bounds[1:]):
        seg = line[a + 1:b]
        start = a + 1 + len(seg) - len(seg.lstrip())
        cells.append((lo + start, lo + max(start, a + 1 + len(seg.rstrip()))))
    if not line[:edges[0]].strip():
        cells.pop(0)  # the border before the first cell
    if cells and edges[-1] > edges[0] and not line[edges[-1] + 1:].strip():
        cells.pop()  # the border after the last
    return cells if len(cells) >= 2 else None


def _grid_spans(text: str, spans: list[tuple[int, int]]) -> None:
    done = -1
    for m in _GRID_NAME.finditer(text):
        if m.start() < done:
            continue
        at = m.start() if text[m.start()] not in "\n" else m.start() + 1
        ls = text.rfind("\n", 0, at) + 1
        le = text.find("\n", at)
        le = len(text) if le < 0 else le
        bars = _GRID_BARS.search(text, ls, le) is not None
        cells = _grid_cells(text, ls, le, bars)
        if cells is None:
            continue
        width = len(cells)
        rows: list[tuple[int, int, list[tuple[int, int]] | None]] = [(ls, le, cells)]
        top = ls
        while top > 0 and len(rows) < 500:  # up, over the rows of the same style and its rule lines
            pe = top - 1
            ps = text.rfind("\n", 0, pe) + 1
            if _grid_rule(text[ps:pe]):
                rows.insert(0, (ps, pe, None))
            else:
                up = _grid_cells(text, ps, pe, bars)
                if up is None or len(up) != width:
                    break
                rows.insert(0, (ps, pe, up))
            top = ps
        end = le
        while end < len(text) and len(rows) < 1000:  # and down
            ns = end + 1
            ne = text.find("\n", ns)
            ne = len(text) if ne < 0 else ne
            if _grid_rule(text[ns:ne]):
                rows.append((ns, ne, None))
            else:
                down = _grid_cells(text, ns, ne, bars)
                if down is None or len(down) != width:
                    break
                rows.append((ns, ne, down))
            end = ne
        done = end
        data = [(i, r[2]) for i, r in enumerate(rows) if r[2] is not None]
        first, head = data[0]
        names = [text[a:b].strip("`*") for a, b in head]
        header = len(data) >= 2 and all(_GRID_HEADER.fullmatch(n) and not _looks_random(n) for n in names) and (
            not bars or first + 1 < len(rows) and rows[first + 1][2] is None)
        if header:
            keys = [n.lower().replace(" ", "").replace("_", "") for n in names]
            ni = next((i for i, k in enumerate(keys) if k in _GRID_NAMES), None)
            vi = next((i for i, k in enumerate(keys) if k in _GRID_VALUES), None) if ni is not None else None
            kinds = {i: name_kind(n) for i, n in enumerate(names) if i not in (ni, vi) and name_kind(n) is not None}
            for _, row in data[1:]:
                if vi is not None:
                    _grid_cell_span(text, row[vi], text[row[ni][0]:row[ni][1]].strip("`*"), spans)
                for i, kind in kinds.items():
                    _grid_cell_span(text, row[i], names[i], spans, kind)
        elif bars and width == 2:  # name | value on every row: psql's expanded records, railway's and npm's boxes
            for _, row in data:
                _grid_cell_span(text, row[1], text[row[0][0]:row[0][1]].strip("`*"), spans)


def _grid_cell_span(text: str, cell: tuple[int, int], name: str, spans: list[tuple[int, int]],
                    kind: str | None = None) -> None:
    kind = kind or (name_kind(name) if 0 < len(name) <= 100 else None)
    if kind is None:
        return
    value = text[cell[0]:cell[1]].strip("`")
    if value and _value_is_secret(value, "token" if kind in ("auth", "line") else kind, False, name):
        lo = cell[0] + text[cell[0]:cell[1]].index(value)
        spans.append((lo, lo + len(value)))


# A name of two words before an aligned "=" (Nomad's "Secret ID    = <uuid>", "Accessor ID  = …"): the name rules
# read one word; this line's name is judged whole (the gate takes such a name when its keyword is in the first word,
# its names rules when in the last)
_ALIGNED_PATTERN = r"^[ \t]*[A-Za-z][\w\-]*[ \t][A-Za-z][\w\-]*[ \t]+=[ \t]+[^\s\"']+[ \t]*\r?$"
_ALIGNED = re.compile(r"^[ \t]*(?P<n>[A-Za-z][\w\-]*[ \t][A-Za-z][\w\-]*)[ \t]+=[ \t]+(?P<v>[^\s\"']+)[ \t]*\r?$",
                      re.ASCII | re.MULTILINE)


# A Netscape cookies.txt line (curl -c, yt-dlp, browser exports): domain, subdomains, path, secure, expiry, name and
# the cookie's value, apart by tabs (#HttpOnly_ before the domain of an HttpOnly cookie)
_COOKIES_TXT = re.compile(r"(?m)^(?:#HttpOnly_)?[^\s#][^\t\n]*\t(?:TRUE|FALSE)\t[^\t\n]*\t(?:TRUE|FALSE)\t\d{1,12}\t"
                          r"(?P<n>[^\t\n]*)\t(?P<v>[^\t\r\n]+)")


# Prose: "creds: admin / V", "creds for the box are admin / V" (a user, a slash and the password)
_CREDS_SLASH = re.compile(r"(?i)\b(?:creds|credentials)\b[^\n.]{0,40}?(?::|\bare\b|\bis\b)[ \t]+[`\"']?"
                          r"[^\s/`\"']+[ \t]*/[ \t]*[`\"']?(?P<v>[^\s`\"']+)")
# Prose: "the root password on the NAS is V", "changed my password to V", "use V as the admin password"
_PROSE_IS = re.compile(r"(?i)(?<![a-z])(?:password|passphrase|passcode|passwd|api[ _\-]?key|secret|token)(?![a-rt-z])"
                       r"(?:\*\*|`)?[^.:\n`\\=(){}]{0,40}?\b(?:is|was|to|as)[ \t]+(?:now[ \t]+)?[`\"']?"
                       r"(?P<v>[^\s\"'`]+)"
                       r"|(?i:\b(?:use|pass))[ \t]+[`\"']?(?P<v2>[^\s\"'`]{6,})[`\"']?[ \t]+(?i:as)[ \t]+"
                       r"(?:[\w\-]+[ \t]+){0,3}(?i:password|passphrase|token|secret|api key|bearer)\b")
# The word password (secret, key) in other languages, and how a sentence gives it its value: a separator
# (":", "=", "->", full-width ones), a particle joined to the word (Japanese は, Korean 는/은, Chinese 是/为) or a
# copula standing as a word of its own (ist, lautet, è, es, est, is, är, je, jest, là, adalah, είναι, هي, היא ...).
# A copula is a whole word (a value "ESSBDM…" after "Kennwort" is no Spanish "es"); a few words (12-24
# characters, no sentence end) may stand between the word and its separator ("la password del server è").
_ARG_HINT = re.compile(r"gh[ \t]+secret|security[ \t]+add-|jsonpath"
                       r"|mosquitto|openssl|rar[ \t]|ssh-keygen|login|poetry|b2[ \t]+a|bundle|oracle:|community"
                       r"|mc[ \t]| [07] |cqlsh|cbq|sqlcmd|bcp|osql|isql|influx|ipmitool|psexec|snmp|ldappasswd|nuget"
                       r"|freerdp|http|xh[ \t]|lftp|--from-literal|wpa_passphrase|snmp-server|createuser|rman"
                       r"|azurewebsites|appid=|echo|printf|<<<|<\("
                       r"|ssm|keyvault|secretsmanager|versions access|-field|op read|config:get|auth:token"
                       r"|output -raw|pass show|-password|bw get|secret show|genkey|--plain|get-secret-value"
                       r"|unseal key|new value:|config get|etcdctl")
def _english_word(m: re.Match) -> bool:
    return m.group().lower().startswith(("password", "passphrase", "passwd"))


_LOCAL_ASCII = re.compile(r"password[ \t]+\S*\d|passwort|kennwort|zugangsdaten|senha|palavra-passe|contrase|clave"
                          "|mot de passe|mdp|nenosiri|nywila|lozink|zaporka|geslo|parool"
                          "|wachtwoord|salasana|adgangskode|passord|heslo|hesla|jelszo|parola|kata sandi"
                          "|kata laluan|sandi|mat khau|password's|passphrase[ \t]*(?:->|=>)"
                          "|pass(?:word|phrase|wd)[^\n:=.]*[ \t]ay[ \t]")  # round 12: Tagalog's copula
_LOCAL_PASSWORD = re.compile(
    r"(?i)(?<![A-Za-z\u00c0-\u024f\u0370-\u03ff\u0400-\u04ff])(?:" + _LOCAL_WORDS + r")"
    r"(?:'s|[^\n:=：＝.,;!?。、]{0,24}?"
    r"(?:[ \t]*(?::(?!//)|[=：＝]|->|=>|→|—|–)"
    r"|(?<=[^\x00-\x7f])(?:は|는|은|이|가|是|为|為|就是|คือ)"
    r"|[ \t]+(?:ist|lautet|lauten|è|é|és|es|est|este|is|är|er|on|je|jest|to|là|adalah|ialah|είναι|هي|هو|היא|הוא|это"
    r"|sind|era|was|c'est|ni|yra|คือ|হলো|হল|হচ্ছে|ay)(?![^\W\d_])"  # round 12: Tagalog's ay
    # a verb at the end (Persian, Hindi): the word, a few words, the value, then "is" (است, है)
    r"|[ \t]+(?=[^\s\"'`]+[ \t]+(?:است|है|हैं)(?![^\W\d_])))"
    r"|(?P<appo>[ \t]+(?=\S*\d)))"
    r"[ \t\u3000]*[「『`\"'“]?"
    r"(?P<v>[^\s\"'`」』”]+)")


# host:port:database:user:password (.pgpass)
_PGPASS = re.compile(r"(?m)^(?=[^:\s]*[A-Za-z*])[^:\s#]+:(?:\d{2,5}|\*):(?=[^:\s]*[A-Za-z*])[^:\s]+:"
                     r"(?=[^:\s]*[A-Za-z*])[^:\s]+:(?P<v>\S+)$")  # host, port, database and user have letters
# A CSV header naming a secret column, then its rows: that column's values
_CSV_HEADS = {d: re.compile(r"(?m)^(?P<head>[ \"]*[\w .\-]+[ \"]*(?:" + d + r"[ \"]*[\w .\-]+[ \"]*)+)\r?$")
              for d in (",", ";", "\t")}
# "use this secret for the staging box: VALUE" (a strong value after a colon in a sentence naming a secret)
_PROSE_COLON = re.compile(r"(?i)\b(?:password|passphrase|passcode|secret|token|api key|credentials?|pat)\b"
                          r"[^.:\n]{0,60}?"
                          r"(?<!sha1)(?<!sha256)(?<!sha384)(?<!sha512)(?<!md5):(?!//)"  # not sha256:<hex>
                          # the value on a line below, in a fence or alone
                          r"(?:[ \t]*\r?\n(?:[ \t]*\r?\n)*(?:[ \t]*(?:```|~~~)[\w\-]*[ \t]*\r?\n)?)?"
                          r"[ \t]*(?P<v>[^\s\"'`]+)")


# The place rules that cost most (a Python scan of the whole text each, in every text the gate lets through to
# them) asked in one RE2 pass which of them can match: each pattern here matches wherever its rule can (the rule
# with its lookarounds left out; the hints as they are, case-folded, since the rule reads the lower-cased text), so
# a rule it rules out would find nothing. Only for ASCII text: beyond it \w, \d, \s, \b and case folding differ
# between the engines, and every rule runs as before.
_PLACE_PATTERNS = {
    "prose_is": _PROSE_IS.pattern.replace("(?<![a-z])", "").replace("(?![a-rt-z])", ""),
    "prose_colon": _PROSE_COLON.pattern.replace("(?!//)", "").replace(
        "(?<!sha1)(?<!sha256)(?<!sha384)(?<!sha512)(?<!md5)", ""),
    "pgpass": _PGPASS.pattern.replace("(?=[^:\\s]*[A-Za-z*])", ""),
    "creds_slash": _CREDS_SLASH.pattern,
    "arg_hint": "(?i)" + _ARG_HINT.pattern,
    "cmd_hint": "(?i)" + _CMD_HINT.pattern,
    "local_ascii": "(?i)" + _LOCAL_ASCII.pattern,
    # redact-speed2: the hint of the values apart from their names (exactly), the well-known calls that take a secret
    # by position and user:password about to be base64-encoded (their patterns without the lookbehind and with a
    # quote for the closing one: supersets)
    "apart_hint": _APART_HINT.pattern,
    "secret_arg": _SECRET_ARG_CALL.pattern.replace("(?<![\\w.])", ""),
    "basic_encode": _BASIC_ENCODE.pattern.replace("(?P=q)", r"\\*[\"'`]"),
    **{"csv" + d: regex.pattern for d, regex in _CSV_HEADS.items()},
    "grid": "(?im)" + _GRID_PATTERN,  # round 12: an output table (exactly: the rule's own pattern, ASCII)
    "aligned": "(?m)" + _ALIGNED_PATTERN,
}
PLACE_RULES = tuple(_PLACE_PATTERNS)
_ALL_PLACE_RULES = frozenset(PLACE_RULES)


def _compile_place_set() -> Any:
    import re2

    rules = re2.Set.SearchSet(re2.Options())
    for pattern in _PLACE_PATTERNS.values():
        rules.Add(pattern.encode())
    rules.Compile()
    return getattr(rules, "_set", rules).Match


_PLACE_SET_MATCH = _compile_place_set()


def place_rules(text: str) -> frozenset[str]:
    """The costlier place rules that can match *text* (all of them for a text that is not ASCII)."""
    if not text.isascii():
        return _ALL_PLACE_RULES
    return frozenset(PLACE_RULES[i] for i in _PLACE_SET_MATCH(text.encode("ascii")))


def _csv_spans(text: str, spans: list[tuple[int, int]], can: frozenset[str] = _ALL_PLACE_RULES) -> None:
    for delim, regex in _CSV_HEADS.items():
        if delim in text and "csv" + delim in can:
            _delimited_spans(text, delim, regex, spans)


def _delimited_spans(text: str, delim: str, regex: re.Pattern, spans: list[tuple[int, int]]) -> None:
    for head in regex.finditer(text):
        names = [c.strip(" \t\"") for c in head.group("head").split(delim)]
        secret = {i: name_kind(n) for i, n in enumerate(names) if name_kind(n) is not None}
        if not secret:
            continue
        pos = head.end() + 1
        while pos < len(text):
            end = text.find("\n", pos)
            end = len(text) if end < 0 else end
            fields = text[pos:end].rstrip("\r").split(delim)
            if len(fields) != len(names):
                break
            at = pos
            for i, field in enumerate(fields):
                value = field.strip(" \t\"")
                if i in secret and _value_is_secret(value, secret[i], True, names[i]):
                    lo = at + field.index(value) if value else at
                    spans.append((lo, lo + len(value)))
                at += len(field) + 1
            pos = end + 1


# ConvertTo-SecureString "pw" -AsPlainText; echo "pw" | docker login --password-stdin (or secret create, chpasswd)
_SECURE_STRING = re.compile(r"(?i)ConvertTo-SecureString[ \t]+(?:-String[ \t]+)?(\\*[\"'])(?P<v>[^\"'\n\\]+)\1")
_ECHO_PIPE = re.compile(r"\becho[ \t]+(?:-[ne][ \t]+)?(\\*[\"']?)(?P<v>[^\s\"'|\\]+)(?P<more>(?:\\n[^\s\"'|\\]+)*)\1"
                        r"[ \t]*\|[^\n|]*"
                        r"(?:--password-stdin|secret[ \t]+create|--stdin|chpasswd|passwd)")
_TEAMS = re.compile(r"\.webhook\.office\.com/webhookb2/(?P<v>[\w\-@/]{20,})")
# CREATE USER … IDENTIFIED BY 'pw', ALTER USER scott IDENTIFIED BY tiger, GRANT … IDENTIFIED WITH x BY 'pw'
_SQL_IDENTIFIED = re.compile(r"(?i)\bidentified[ \t]+(?:with[ \t]+\S+[ \t]+)?by[ \t]+(?:password[ \t]+)?"
                             r"(?:(?P<q>\\*[\"'`])(?P<v>[^\"'`\n\\]+)(?P=q)|(?P<b>[^\s;\"'`\\]+))")
# A name and its value given apart: <add key="ApiKey" value="…"/>, <entry key="db.password">…</entry>,
# {"name": "DB_PASSWORD", "value": "…"} in text, and Kubernetes' "- name: DB_PASSWORD\n  value: …".
# (round 12: Azure's {"keyName": "key1", …, "value": "…"} too, as az … keys list prints it after its command line)
_PAIR = re.compile(r"\b(?:[Kk]eyName|[Nn]ame|[Kk]ey|ParameterKey|OptionName|Variable)\\*[\"']?[ \t]*[:=][ \t]*\\*[\"']?"
                   r"(?P<n>/?[A-Za-z_][\w./\-]{0,100})\\*[\"']?"
                   r"(?:(?P<mid>[^<>{}\n]{0,120}?(?:\r?\n[^<>{}\n]{0,120}?){0,3})"
                   r"\b(?:[Vv]alue|ParameterValue|VALUE)\\*[\"']?"
                   r"[ \t]*[:=][ \t]*|(?P<el>[^<>\n]{0,120}?>)(?=[^<]))")
# variable "db_password" { default = "…" } (Terraform)
_HCL_DEFAULT = re.compile(r"\bvariable[ \t]+\\*[\"'](?P<n>[\w.\-]{1,100})\\*[\"'][ \t]*\{(?P<mid>[^{}]{0,300}?)"
                          r"\bdefault[ \t]*=[ \t]*")
# auth=("user", "pw"), HTTPBasicAuth("user", "pw")
_AUTH_TUPLE = re.compile(r"(?i)\b(?:auth|HTTPBasicAuth|HTTPDigestAuth|BasicAuth)[ \t]*(?:=[ \t]*)?\([ \t]*"
                         r"(?:username[ \t]*=[ \t]*)?(\\*[\"'])[^\"'\n]*\1[ \t]*,[ \t]*(?:password[ \t]*=[ \t]*)?"
                         r"(\\*[\"'])(?P<v>[^\"'\n\\]+)\2")
# a token spelt with escapes (\u0073k-proj-…, \x73k-…): decoded, then judged as the token it spells
_ESCAPED_RUN = re.compile(r"(?:[A-Za-z0-9_\-.+/=~:]|\\u[0-9a-fA-F]{4}|\\x[0-9a-fA-F]{2}){20,}")
_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\x([0-9a-fA-F]{2})")


def _pair_span(text: str, m: re.Match, kind: str, spans: list[tuple[int, int]]) -> None:
    if m.groupdict().get("el") is not None:  # <entry key="db.password">VALUE</entry>
        v = _XML_TEXT.match(text, m.end())
        if text.startswith("</", v.end()) and _value_is_secret(v.group(), kind, True, m.group("n")):
            spans.append(v.span())
        return
    v = _VALUE.match(text, m.end())
    if v is None or v.lastgroup == "uq" and text[v.end():v.end() + 1] in ("(", "["):
        return
    if kind in ("auth", "line"):
        value = v.group(v.lastgroup)
        first, _, rest = value.partition(" ")
        if first.lower() in _SCHEMES and rest.strip():
            spans.append((v.end(v.lastgroup) - len(rest), v.end(v.lastgroup)))
        elif value.strip() and MASK not in value:
            spans.append(v.span(v.lastgroup))
        return
    if _value_is_secret(v.group(v.lastgroup), kind, v.lastgroup != "uq", m.group("n")):
        spans.append(v.span(v.lastgroup))


def find_secrets(text: str) -> list[tuple[int, int]]:
    """The spans of *text* to mask, sorted and merged."""
    hits = _GATE(text.encode("utf-8", "surrogatepass"))
    if not hits:
        return []
    low = text.lower()
    return _find(text, low, _words(low), hits)


_ANY_TRIGGER = re.compile("|".join(_NAME_TRIGGERS))


def _words(low: str) -> list[str]:
    """The name keywords in *low* (one scan finds whether there is any)."""
    if _ANY_TRIGGER.search(low) is None:
        return []
    return [word for word in _NAME_TRIGGERS if word in low]


def _find(text: str, low: str, words: list[str], hits: Any = (NAMES, SHAPES, PLACES, BASE64)) -> list[tuple[int, int]]:
    """The spans the rules the gate let through (*hits*) find."""
    spans: list[tuple[int, int]] = []
    if "\x1b" in text or not text.isascii() and _INVISIBLE.search(text):
        return _find_visible(text)
    if ("%" in text or "&" in text) and _ENCODED_NAME.search(text):
        spans.extend(_find_decoded(text))
    if not text.isascii() and _UNICODE_SPACE.search(text):
        text = text.translate(_UNICODE_SPACES)  # one character for one: every offset holds
        low = text.lower()
    if not text.isascii() and _MIXED_SCRIPT.search(text):
        text = _latin(text)  # pаssword with a Cyrillic а: one character for one
        low = text.lower()
        words = _words(low)
        hits = (NAMES, SHAPES, PLACES, BASE64)  # the gate saw the text as it is stored
    if NAMES in hits and words:
        _name_spans(text, low, words, spans)
        if "variable" in low:
            for m in _HCL_DEFAULT.finditer(text):
                kind = name_kind(m.group("n"))
                if kind is not None:
                    _pair_span(text, m, kind, spans)
        if "auth" in words:
            spans.extend(m.span("v") for m in _AUTH_TUPLE.finditer(text)
                         if _value_is_secret(m.group("v"), "password", True))
        if "</key>" in low or "</name>" in low:
            # <key>APIToken</key><string>…</string> (plist), <Key>Password</Key><Value>…</Value>, Hadoop's and
            # Maven's <name>fs.s3a.secret.key</name><value>…</value>
            for m in _XML_KEY_PAIR.finditer(text):
                kind = name_kind(m.group("n"))
                if kind is not None and _value_is_secret(m.group("v"), kind, True, m.group("n")):
                    spans.append(m.span("v"))
        if "value" in low or "</" in text:  # key="NAME" value="…", <entry key="NAME">…</entry>
            for m in _PAIR.finditer(text):
                kind = name_kind(m.group("n"))
                if kind is not None:
                    _pair_span(text, m, kind, spans)
    if PLACES in hits:
        _place_spans(text, low, words, spans)
    if SHAPES in hits:
        _shape_spans(text, spans)
        if _ADJACENT_LITERALS.search(text):
            _chain_spans(text, spans)
    if BASE64 in hits:
        _base64_spans(text, spans)
    spans = [span for span in spans if span[1] > span[0]]  # an empty value ('Basic ' + …) is no mask's place
    if not spans:
        return spans
    _repeated_spans(text, spans)
    if "\n" in text:
        _continued_spans(text, spans)
    spans.sort()
    merged = [spans[0]]
    for start, end in spans[1:]:
        if start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


# Spaces other than " " and tab that people (and word processors) put around "=" and ":"; the rules
# read them as " ".
_UNICODE_SPACES = {c: " " for c in (0xA0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000)}
_UNICODE_SPACES.update({0xFF1A: ":", 0xFF1D: "="})  # full-width separators (Japanese and Chinese input)
_UNICODE_SPACE = re.compile("[" + "".join(map(chr, _UNICODE_SPACES)) + "]")

# Cyrillic and Greek letters that look like Latin ones, inside a word of Latin letters (pаssword, tоken): read
# as the Latin letter. A word all in Cyrillic or Greek (пароль) is left as it is.
_CONFUSABLES = {"а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "і": "i", "ѕ": "s", "ј": "j",
                "ԁ": "d", "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C",
                "Т": "T", "Х": "X", "ο": "o", "α": "a", "ρ": "p", "Ο": "O", "Α": "A", "ε": "e", "κ": "k", "τ": "t"}
_CONFUSABLE_CLASS = "[" + "".join(_CONFUSABLES) + "]"
_MIXED_SCRIPT = re.compile("(?<=[A-Za-z])" + _CONFUSABLE_CLASS + "+|" + _CONFUSABLE_CLASS + "+(?=[A-Za-z])")
_CONFUSABLE_TABLE = str.maketrans(_CONFUSABLES)


def _latin(text: str) -> str:
    return _MIXED_SCRIPT.sub(lambda m: m.group().translate(_CONFUSABLE_TABLE), text)


# Characters a reader does not see: ANSI escapes (a terminal's colours: grep --color, jq, ls) and zero-width
# characters. The rules read the text without them; the spans found are mapped back to the text as stored.
_INVISIBLE = re.compile("\x1b\\[[0-?]*[ -/]*[@-~]|\x1b\\][^\x07\x1b]{0,200}(?:\x07|\x1b\\\\)|\x1b[@-Z\\\\-_]"
                        "|[\u200b-\u200d\u2060\ufeff]")
_INVISIBLE_BYTES = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]{0,200}(?:\x07|\x1b\\)|\x1b[@-Z\\-_]"
                              rb"|\xe2\x80[\x8b-\x8d]|\xe2\x81\xa0|\xef\xbb\xbf")


def _find_visible(text: str) -> list[tuple[int, int]]:
    """:func:`_find` of *text* read without its invisible characters, in the offsets of *text*."""
    keep: list[int] = []  # the offset in text of each character kept
    parts = []
    pos = 0
    for m in _INVISIBLE.finditer(text):
        parts.append(text[pos:m.start()])
        keep.extend(range(pos, m.start()))
        pos = m.end()
    parts.append(text[pos:])
    keep.extend(range(pos, len(text)))
    visible = "".join(parts)
    if len(visible) == len(text):  # a lone ESC: nothing to set aside
        low = text.lower()
        return _find(text.replace("\x1b", " "), low, _words(low))
    low = visible.lower()
    return [(keep[a], keep[b - 1] + 1) for a, b in _find(visible, low, _words(low)) if b > a]


# -- a secret repeated ---------------------------------------------------------------------------
# A secret found once (by its name, shape or place) is masked wherever the same text repeats it bare: "export
# DB_PASSWORD=V" and, further down, "psql … # tried V" or an error message quoting V. The scope is one text (a
# message, a tool call's arguments, a tool result): the redactor judges each text alone, and the export skips the
# texts its gate clears without reading them, so a repeat in another message of the session is not seen.
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _repeated_spans(text: str, spans: list[tuple[int, int]]) -> None:
    values = {text[a:b] for a, b in spans if 8 <= b - a <= 512}
    for value in values:
        if MASK in value or not _strong(value):
            continue
        at = text.find(value)
        while at >= 0:
            end = at + len(value)
            if (not at or text[at - 1] not in _TOKEN_CHARS) and (end == len(text) or text[end] not in _TOKEN_CHARS):
                spans.append((at, end))
            at = text.find(value, end)


# -- secrets split across lines -------------------------------------------------------------------
# A masked value that ends its line goes on when the next line starts with the rest of a token: a
# terminal or an editor wrapped it ("the key is sk_live_…" / "ZyX…"), or a shell continuation split
# it (…\ then the rest). The masked part is a token's length (16 or more); the rest must look like a
# token's: 8 or more token characters, random-looking, not a timestamp or a hex digest, starting the line
# (no indent), alone or before a space, a quote or a bracket (not a name before = or :, not a CSV field).
_CONTINUATION = re.compile(r"\\?\r?\n(?P<v>[A-Za-z0-9_+/=~\-.]{8,})(?=$|[\s\"'`)\]}\\]|\.(?:\s|$))")


def _continued_spans(text: str, spans: list[tuple[int, int]]) -> None:
    ends = {end for start, end in spans if end - start >= 16}
    todo = sorted(ends)
    while todo:
        end = todo.pop()
        m = _CONTINUATION.match(text, end)
        if m is None:
            continue
        value = m.group("v").rstrip(".")
        if (value.strip(_PLAIN_TEXT) and _looks_random(value) and MASK not in value
                and m.start("v") + len(value) not in ends):
            spans.append((m.start("v"), m.start("v") + len(value)))
            ends.add(m.start("v") + len(value))
            todo.append(m.start("v") + len(value))


_PLAIN_TEXT = _PLAIN.decode()


# String literals the language joins: ("ghp_…" "…"), "sk-…" +\n "…", 'a' . 'b' (PHP). Under a secret's
# name (a Python constant in parentheses, a JS concatenation), or when the joined text holds a shape.
_ADJACENT_LITERALS = re.compile(r"[\"'][ \t]*(?:[+.][ \t]*)?(?:\\?\r?\n[ \t]*)*(?:[+.][ \t]*)?[\"']")
_CHAIN_GAP = re.compile(r"(?:[ \t]|\\?\r?\n){0,40}")
# between two literals: any line ends inside parentheses; outside them only after an operator (+, PHP's .)
# or a backslash (two string statements on two lines are not one string)
_CHAIN_JOIN = re.compile(r"(?:[ \t]|\\?\r?\n){0,40}(?:[+.](?:[ \t]|\\?\r?\n){0,40})?")
_CHAIN_JOIN_LINE = re.compile(r"(?:[ \t]|\\\r?\n){0,40}(?:[+.](?:[ \t]|\\?\r?\n){0,40})?")
_LITERAL = re.compile(r"\"(?P<d>[^\"\\\n]*)\"|'(?P<s>[^'\\\n]*)'")


def _literal_chain(text: str, pos: int, lines: bool = False) -> list[tuple[int, int]] | None:
    """The contents of the string literals joined from *pos*: two or more, or one in parentheses (across
    lines in parentheses, or when *lines*: the literals' caller is not known)."""
    paren = text.startswith("(", pos)
    at = _CHAIN_GAP.match(text, pos + 1).end() if paren else pos
    join = _CHAIN_JOIN if paren or lines else _CHAIN_JOIN_LINE
    parts: list[tuple[int, int]] = []
    while len(parts) < 64:
        lit = _LITERAL.match(text, at)
        if lit is None:
            break
        parts.append(lit.span(lit.lastgroup))
        at = join.match(text, lit.end()).end()
    if len(parts) >= 2 or parts and paren and text.startswith(")", at):
        return parts
    return None


def _chain_spans(text: str, spans: list[tuple[int, int]]) -> None:
    """Joined literals whose joined text holds a shape ("ghp_…" "…" in a call): the parts of the shape."""
    done = -1
    for m in _ADJACENT_LITERALS.finditer(text):
        if m.start() < done:
            continue
        quote = text[m.start()]
        opening = text.rfind(quote, max(0, m.start() - 4096), m.start())  # the literal's own line, bounded
        if opening < 0 or "\n" in text[opening:m.start()]:
            continue
        parts = _literal_chain(text, opening, lines=True)
        if not parts:
            continue
        done = parts[-1][1]
        joined = "".join(text[a:b] for a, b in parts)
        found = find_secrets(joined)
        offset = 0
        for a, b in parts:
            for lo, hi in found:
                lo, hi = max(lo, offset), min(hi, offset + b - a)
                if lo < hi:
                    spans.append((a + lo - offset, a + hi - offset))
            offset += b - a


# -- base64 ---------------------------------------------------------------------------------------
# A run of base64 that decodes to text holding a secret (echo … | base64 -d, b64decode("…"), atob):
# the whole run is masked. Only runs that start like encoded text are decoded.
_B64_RUN = re.compile(r"(?<![A-Za-z0-9+/_\-])(?=(?:" + _B64_GROUP + r"){6})[A-Za-z0-9+/_\-]{24,}={0,2}")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_HEX_RUN = re.compile(r"(?<![A-Za-z0-9+/_\-])(?=" + _HEX_TEXT + r")(?:[0-9a-fA-F]{2})+(?![A-Za-z0-9+/_\-])")


def _base64_spans(text: str, spans: list[tuple[int, int]]) -> None:
    import base64
    import binascii

    for run in _B64_RUN.finditer(text):
        body = run.group().rstrip("=")
        body = body[:len(body) - len(body) % 4] if len(body) % 4 == 1 else body
        try:
            raw = base64.b64decode(body + "=" * (-len(body) % 4),
                                   altchars=b"-_" if "-" in body or "_" in body else None)
            plain = raw.decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        if not _CONTROL.search(plain) and (find_secrets(plain) or _basic_credentials(plain)):
            spans.append(run.span())
    for run in _HEX_RUN.finditer(text):  # round 12: hex of text (echo 7061… | xxd -r -p >> .env)
        try:
            plain = bytes.fromhex(run.group()).decode("utf-8")
        except ValueError:
            continue
        if not _CONTROL.search(plain) and (find_secrets(plain) or _basic_credentials(plain)):
            spans.append(run.span())


# user:password encoded alone (HTTP Basic's credentials, a registry's auth, echo … | base64 -d): the password part
# must look like a credential on its own (not a port, a tag, a digest: nginx:1.27, sha256:<hex>)
_USER_PASSWORD = re.compile(r"[\w.@+\-]{2,64}:(?P<p>[^\s:]{8,128})")


def _basic_credentials(plain: str) -> bool:
    m = _USER_PASSWORD.fullmatch(plain.strip())
    return (m is not None and not _HEX_KEY.fullmatch(m.group("p").lower())
            and contained_secret(m.group("p"), "password"))


def redact_text(text: str) -> str:
    """*text* with every secret found replaced by ``[REDACTED]``; the same object when nothing is."""
    if len(text) < 8:
        return text
    if len(text) <= 64:
        # short values (tool names, paths, models, ids, JSON keys) repeat on every message: remember them
        out = _redact_short(text)
        return text if out == text else out  # the cache holds an equal string, not necessarily this one
    hits = _GATE(text.encode("utf-8", "surrogatepass"))
    if not hits:
        return text
    if 4096 <= len(text) <= 65536:
        out = _redact_long(text)  # system prompts repeat on every session of a backup
    else:
        return _redact(text, hits)
    return text if out == text else out  # the cache holds an equal string, not necessarily this one


@lru_cache(maxsize=8192)
def _redact_short(text: str) -> str:
    return _redact(text)


@lru_cache(maxsize=32)
def _redact_long(text: str) -> str:
    return _redact(text)


def _redact(text: str, hits: Any = None) -> str:
    if hits is None:
        hits = _GATE(text.encode("utf-8", "surrogatepass"))
        if not hits:
            return text
    if text.lstrip()[:1] in _JSON_OPENERS:
        decoded = _redact_json(text)
        if decoded is not None:
            return decoded
    low = text.lower()
    spans = _find(text, low, _words(low), hits)
    if not spans:
        return text
    return _masked(text, spans)


def _masked(text: str, spans: list[tuple[int, int]]) -> str:
    out, pos = [], 0
    for start, end in spans:
        out.append(text[pos:start])
        out.append(MASK)
        pos = end
    out.append(text[pos:])
    return "".join(out)


# -- JSON -----------------------------------------------------------------------------------------
# A text that is JSON (and that the gate lets through) is judged by the values it holds, decoded:
# a key, an escaped token, a YAML file or a config line written into a tool call's arguments are
# then plain strings with their own line ends, however deep the escaping. The raw text's rules see
# one level of escaping only; the decoded walk sees every level.
_JSON_OPENERS = ("{", "[", '"')
_NESTED = 24  # JSON inside JSON strings, levels decoded (each level at least doubles the escaping)


def _redact_json(text: str, level: int = 0) -> str | None:
    """*text* redacted through its decoded values, or None when it is not JSON (then it is text)."""
    try:
        value = json_text.loads(text)  # deeper than json_text.MAX_DEPTH: not JSON, redacted as text
    except ValueError:
        return None
    out = _walk(value, None, level)
    if out is value:
        return text
    return _encode_like(out, text)


def _encode_like(value: Any, text: str) -> str:
    """JSON for *value* in the layout of *text*: compact or spaced, indented or not, ASCII or not."""
    head = text.lstrip()
    indent = None
    if head[:1] in "{[" and head[1:2] == "\n":
        line = head[2:head.find("\n", 2)] if "\n" in head[2:] else head[2:]
        indent = len(line) - len(line.lstrip(" ")) or None
    spaced = indent is not None or '": ' in text or '", ' in text or ", " in text[:200]
    separators = (", ", ": ") if spaced else (",", ":")
    if indent is not None:
        separators = (",", ": ")
    return json.dumps(value, ensure_ascii=text.isascii(), separators=separators, indent=indent)


def redact_value(value: Any, name: str | None = None) -> Any:
    """Strings redacted (JSON inside them through its values), dict keys too, a key that says secret
    masking the value it names, bytes as the text they hold; containers copied, however deep."""
    return _walk(value, name, 0)


def _walk(root: Any, name: str | None, level: int) -> Any:
    """The redacted copy of *root*, or *root* itself when nothing in it changed. Iterative: JSON
    nests as deep as the parser allows, deeper than Python's recursion limit."""
    if not isinstance(root, (dict, list)):
        return _leaf(root, name, level)
    changed = False
    out_root: Any = {} if isinstance(root, dict) else []
    stack = [(root, out_root, name)]
    while stack:
        src, dst, owner = stack.pop()
        within = container_kind(owner) if owner.__class__ is str else None  # {"passwords": {"prod": …}}
        if isinstance(src, dict):
            pair = _pair_name(src)
            for k, v in src.items():
                key = k
                if k.__class__ is str and len(k) >= 8:
                    key = MASK if within is not None and secret_key(k, within) else redact_text(k)
                    if key is not k:
                        changed = True
                        while key in dst or key in src:
                            key += "'"  # two masked keys stay two keys
                vname = k if k.__class__ is str else None
                if vname is not None and len(vname) == 20 and _AWS_KEY_ID.fullmatch(vname):
                    vname = "aws_secret_access_key"  # {"AKIA…": "secret"}
                elif vname in _JWK_PRIVATE and "kty" in src:
                    vname = "private_key"  # a JWK's private members (round 11): d, p, q, dp, dq, qi
                if pair is not None and (vname in _PAIR_VALUES or vname == "text" and "element" in src):
                    vname = pair
                elif pair is not None and vname in _PAIR_NAMES:
                    vname = None  # {"ParameterKey": "DbPassword"}: the name, not a key's value
                if isinstance(v, (dict, list)):
                    child: Any = {} if isinstance(v, dict) else []
                    dst[key] = child
                    stack.append((v, child, vname))
                else:
                    if within is not None and v.__class__ is str and k.__class__ is str and not _neutral_child(k) \
                            and contained_secret(v, within):
                        new = MASK
                    else:
                        new = _leaf(v, vname, level)
                    changed |= new is not v
                    dst[key] = new
        else:
            flag = None  # ["--password", "VALUE"]: an argument list names the value after a flag
            for v in src:
                if isinstance(v, (dict, list)):
                    child = {} if isinstance(v, dict) else []
                    dst.append(child)
                    stack.append((v, child, owner))
                    flag = None
                else:
                    is_flag = v.__class__ is str and v.startswith("-") and len(v) <= 64
                    if within is not None and flag is None and v.__class__ is str and name_kind(owner) is None \
                            and contained_secret(v, within):
                        new = MASK  # {"api_keys": ["…"]}: a list named as secrets
                    else:
                        new = _leaf(v, flag if flag is not None and not is_flag else owner, level)
                    flag = v.lstrip("-") if is_flag and name_kind(v.lstrip("-")) is not None else None
                    changed |= new is not v
                    dst.append(new)
            if len(src) >= 3 and _argv_spans(src, dst):
                changed = True
            elif len(src) == 2 and src[0].__class__ is str and src[1].__class__ is str and dst[1] is src[1] \
                    and len(src[0]) <= 100 and name_kind(src[0]) is not None and _strong(src[1]) and (
                    _looks_random(src[1]) or any(c in _SYMBOLS for c in src[1])):
                new = _leaf(src[1], src[0], level)  # a header as a [name, value] pair ([["X-Vault-Token", "V"]])
                if new is not src[1]:
                    dst[1] = new
                    changed = True
    return out_root if changed else root


def _argv_spans(src: list, dst: list) -> bool:
    """An argument list read as the command line it spells (["docker", "login", "-p", "PW", …]): the parts of
    its words that the rules find, masked in the words no other rule changed. True when one is."""
    if not all(v.__class__ is str and "\n" not in v and len(v) <= 4096 for v in src):
        return False
    joined = " ".join(src)
    found = find_secrets(joined) if len(joined) >= 8 else []
    if not found:
        return False
    masked = False
    start = 0
    for i, word in enumerate(src):
        end = start + len(word)
        parts = [(max(lo, start) - start, min(hi, end) - start) for lo, hi in found if lo < end and hi > start]
        if parts and dst[i] is word:
            dst[i] = _masked(word, parts)
            masked = True
        start = end + 1
    return masked


_AWS_KEY_ID = re.compile(r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}")
_PAIR_NAMES = ("name", "Name", "key", "Key", "ParameterKey", "OptionName",
               # round 11: a vault item's {"label": "Password", "value": V}, {"keyName": …}; a browser tool's
               # {"element": "Password textbox", "text": V}
               "label", "Label", "keyName", "KeyName", "element")
_JWK_PRIVATE = frozenset({"d", "p", "q", "dp", "dq", "qi", "k"})
_PAIR_VALUES = frozenset({"value", "Value", "ParameterValue", "OptionValue", "SecretString"})


def _pair_name(d: dict) -> str | None:
    """{"name": "DB_PASSWORD", "value": "…"}: the name the value goes by."""
    for k in _PAIR_NAMES:
        n = d.get(k)
        if n.__class__ is str and len(n) <= 100 and name_kind(n) is not None:
            return n
    return None


def _leaf(value: Any, name: str | None, level: int) -> Any:
    if value.__class__ is str:
        if name is not None:
            kind = name_kind(name)
            if kind in ("auth", "line"):
                out = redact_text(f"{name}: {value}")
                return value if out == f"{name}: {value}" else out[len(name) + 2:]
            if kind is not None and _value_is_secret(value, kind, True, name):
                return MASK
        if len(value) <= 64:
            return redact_text(value)  # remembered
        hits = _GATE(value.encode("utf-8", "surrogatepass"))
        if not hits:
            return value
        if level < _NESTED and value.lstrip()[:1] in _JSON_OPENERS:
            decoded = _redact_json(value, level + 1)
            if decoded is not None:
                return decoded
        low = value.lower()
        spans = _find(value, low, _words(low), hits)
        return _masked(value, spans) if spans else value
    if isinstance(value, (int, float)) and value.__class__ is not bool and name is not None:
        kind = name_kind(name)  # {"pin_password": 123456}
        if kind is not None and _value_is_secret(repr(value), kind, False, name):
            return MASK
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return redact_bytes(bytes(value))
    return value


def redact_bytes(data: bytes) -> bytes:
    """A BLOB as the text it holds: secrets masked inside, every other byte kept (the same object when
    nothing is found)."""
    text = data.decode("utf-8", "surrogateescape")
    out = redact_text(text)
    if out is text:
        return data
    try:
        return out.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate decoded from a JSON escape
        return out.encode("utf-8", "backslashreplace")


# Columns that link rows (ids, content hashes) are never touched; every other text column is.
KEEP_COLUMNS = frozenset({"id", "session_id", "parent_session_id", "tool_call_id", "system_prompt_hash"})


# Columns Hermes stores numbers or flags in: not looked at (a text value there would still be).
_NUMERIC_COLUMNS = frozenset({"timestamp", "token_count", "active", "compacted", "observed", "started_at", "ended_at",
                              "message_count", "tool_call_count", "input_tokens", "output_tokens", "archived",
                              "pinned", "hidden", "last_activity_at"})


@lru_cache(maxsize=64)
def _text_columns(columns: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(c for c in columns if c not in KEEP_COLUMNS and c not in _NUMERIC_COLUMNS)


def redact_row(row: dict[str, Any]) -> dict[str, Any]:
    """A copy of a stored row with every text column redacted, except the linking ids and hashes."""
    out = row.copy()
    for k in _text_columns(tuple(row)):
        v = row[k]
        if v.__class__ is str:
            if len(v) >= 8:
                out[k] = redact_text(v)
        elif v.__class__ is bytes:
            out[k] = redact_bytes(v)
    for k in _NUMERIC_COLUMNS.intersection(row):
        if row[k].__class__ is str:
            out[k] = redact_text(row[k])
        elif row[k].__class__ is bytes:
            out[k] = redact_bytes(row[k])
    return out
