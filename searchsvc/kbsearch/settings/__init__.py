"""Service configuration, read from `SEARCHSVC_*` environment variables (see docs/operations/configuration.md).

`Settings` is made of sections, one per collaborator that reads them (`settings.storage` for the store,
`settings.embedding` for the embedder...), as Gafaelfawr's `Config`; each factory gets only its section.
The variables stay flat (`SEARCHSVC_PORT`, not `SEARCHSVC_HTTP__PORT`), and so do keyword arguments:
`Settings(api_token=...)` puts `api_token` in its section. A new setting goes in the section of the part
that reads it (kbsearch.settings.service, kbsearch.settings.retrieval); a new collaborator gets a new
section class there and one field on `Settings`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from kbsearch.settings.base import ENV_PREFIX, LOOPBACK_HOSTS, Section, is_loopback, names
from kbsearch.settings.retrieval import (
    AskSettings,
    ChatSettings,
    ChunkSettings,
    EmbedderSettings,
    PeerSettings,
    QueryLogSettings,
    RebuildSettings,
    RerankSettings,
    SearchSettings,
)
from kbsearch.settings.service import (
    AuthSettings,
    CompatSettings,
    ConversionSettings,
    DocumentSettings,
    HttpSettings,
    StoreSettings,
)
from kbsearch.settings.tracing import TracingSettings

__all__ = [
    "ENV_PREFIX",
    "LOOPBACK_HOSTS",
    "AskSettings",
    "AuthSettings",
    "ChatSettings",
    "ChunkSettings",
    "CompatSettings",
    "ConversionSettings",
    "DocumentSettings",
    "EmbedderSettings",
    "HttpSettings",
    "PeerSettings",
    "QueryLogSettings",
    "RebuildSettings",
    "RerankSettings",
    "SearchSettings",
    "Section",
    "Settings",
    "StoreSettings",
    "TracingSettings",
    "describe",
    "is_loopback",
    "names",
]


def describe(exc: ValidationError) -> str:
    """One line per problem, naming the variable; never the value (it may be a token)."""
    lines = []
    for error in exc.errors(include_url=False, include_context=False, include_input=False):
        variable = f"{ENV_PREFIX}{_field_of(error['loc'])}".upper() if _field_of(error["loc"]) else ""
        message = error["msg"].removeprefix("Value error, ")
        lines.append(f"  {variable}: {message}" if variable else f"  {message}")
    return "\n".join(lines)


def _field_of(loc: tuple[int | str, ...]) -> str | None:
    """The flat setting an error is about: `("storage", "qdrant_url")` is QDRANT_URL; a section's own check, none."""
    if loc and loc[0] in Settings.sections():
        loc = loc[1:]
    return str(loc[0]) if loc else None


class _FlatEnvironment(EnvSettingsSource):
    """`SEARCHSVC_<FIELD>` for every section's fields and Settings' own: the variables stay flat."""

    def __call__(self) -> dict[str, Any]:
        sections = Settings.sections()
        values = {name: value for name, value in super().__call__().items() if name not in sections}
        for section in sections.values():
            values.update(EnvSettingsSource(section)())
        return values


class Settings(BaseSettings):
    """The service's settings, one section per collaborator; flat names in and out of the environment."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", hide_input_in_errors=True)

    http: HttpSettings = Field(default_factory=HttpSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    compat: CompatSettings = Field(default_factory=CompatSettings)
    documents: DocumentSettings = Field(default_factory=DocumentSettings)
    conversion: ConversionSettings = Field(default_factory=ConversionSettings)
    storage: StoreSettings = Field(default_factory=StoreSettings)
    embedding: EmbedderSettings = Field(default_factory=EmbedderSettings)
    chunking: ChunkSettings = Field(default_factory=ChunkSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    reranking: RerankSettings = Field(default_factory=RerankSettings)
    chat: ChatSettings = Field(default_factory=ChatSettings)
    answers: AskSettings = Field(default_factory=AskSettings)
    insights: QueryLogSettings = Field(default_factory=QueryLogSettings)
    rebuilds: RebuildSettings = Field(default_factory=RebuildSettings)
    peering: PeerSettings = Field(default_factory=PeerSettings)
    telemetry: TracingSettings = Field(default_factory=TracingSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Keyword arguments first, then the flat variables; both flat, routed to sections by _route.
        return (init_settings, _FlatEnvironment(settings_cls))

    @classmethod
    def sections(cls) -> dict[str, type[Section]]:
        """Each section's attribute name and class."""
        return {
            name: field.annotation
            for name, field in cls.model_fields.items()
            if isinstance(field.annotation, type) and issubclass(field.annotation, Section)
        }

    @classmethod
    def variables(cls) -> dict[str, FieldInfo]:
        """Every setting by its flat name (`api_token`, read from SEARCHSVC_API_TOKEN), in sections or not."""
        sections = cls.sections()
        found = {name: field for name, field in cls.model_fields.items() if name not in sections}
        for section in sections.values():
            found.update(section.model_fields)
        return found

    @model_validator(mode="before")
    @classmethod
    def _route(cls, data: Any) -> Any:
        """Flat keys (`api_token=...`, or SEARCHSVC_API_TOKEN) go to their section; a given section is kept."""
        if not isinstance(data, dict):
            return data
        sections = cls.sections()
        home = {field: name for name, kind in sections.items() for field in kind.model_fields}
        routed: dict[str, Any] = {key: value for key, value in data.items() if key not in home}
        for key, value in data.items():
            if key in home:
                section = routed.get(home[key], {})
                if isinstance(section, BaseModel):  # a section given whole, and one of its fields beside it
                    section = section.model_dump(exclude_unset=True)
                routed[home[key]] = {**section, key: value}
        for name in sections:
            # Inside Settings a missing section is made of its defaults, not read again from the environment.
            routed.setdefault(name, {})
        return routed

    @model_validator(mode="after")
    def _check(self) -> Settings:
        """What no one section can judge alone."""
        auth, host = self.auth, self.http.host
        if (
            auth.api_token is None
            and not auth.authenticates
            and not is_loopback(host)
            and not auth.allow_unauthenticated_writes
        ):
            raise ValueError(
                f"SEARCHSVC_HOST={host} is reachable from other machines and SEARCHSVC_API_TOKEN is not "
                "set, so anyone there could write and delete documents: set SEARCHSVC_API_TOKEN (or "
                "SEARCHSVC_TOKENS_FILE), or "
                "SEARCHSVC_ALLOW_UNAUTHENTICATED_WRITES=true to accept open writes"
            )
        if self.reranking.rerank == "llm" and self.chat.llm_model is None:
            raise ValueError("SEARCHSVC_RERANK=llm needs SEARCHSVC_LLM_MODEL (the chat model that ranks)")
        lo, hi = self.chunk_range
        if lo > hi:
            raise ValueError(f"chunk_min_chars ({lo}) must not exceed chunk_max_chars ({hi})")
        if self.chunking.chunk_overlap_chars >= lo:
            raise ValueError("chunk_overlap_chars must be smaller than chunk_min_chars")
        return self

    @property
    def chunk_range(self) -> tuple[int, int]:
        """(min, max) chunk characters for the configured embedder."""
        return self.chunking.range_for(self.embedding.embedder)
