"""speechd: an OpenAI-compatible speech server where every synthesis is a durable cast."""

__version__ = "0.4.0"  # the release: pyproject.toml reads it; CHANGELOG.md names it

# No cast id in any record speechd's loggers make (speechd.logs), whoever handles them.
from speechd.logs import mask_loggers as _mask_loggers

_mask_loggers()
