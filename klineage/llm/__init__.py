"""The llm room: building requests, sending them (the Anthropic SDK or an OpenAI-compatible server, one
retry loop), prices and usage, parsing answers, and a budgeted session. Only this package touches an
LLM SDK; lineage (the llm proposer) and apply (the llm materializer) build their prompts and use it.
"""
from klineage.llm.backends import (RETRY_STATUS, AnthropicBackend, OpenAICompatBackend, RetryingBackend,  # noqa: F401
                                   httpx, make_backend)
from klineage.llm.errors import BudgetExhausted, LLMError, MissingKeyError, ParseError  # noqa: F401
from klineage.llm.parsing import parse_kernel  # noqa: F401
from klineage.llm.pricing import DEFAULT_MODEL, PRICES, Usage, no_price_warning, price_for  # noqa: F401
from klineage.llm.requests import (DEFAULT_MAX_TOKENS, build_anthropic_request, build_openai_request,  # noqa: F401
                                   estimate_cost, prompt_hash, prompt_parts)
from klineage.llm.session import Exchange, LLMSession, open_session  # noqa: F401
