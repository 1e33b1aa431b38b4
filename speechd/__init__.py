"""speechd: an OpenAI-compatible speech server where every synthesis is a durable cast."""

__version__ = "0.1.0"
