"""Read a chat model's reply aloud while it is still being written: a streamed chat completion
piped into a speechd live cast, the audio saved (and playable by link) as it is made.

    python clients/examples/chat_live.py "Tell me about owls." [OUT.mp3]

The chat model is any OpenAI-compatible server: OPENAI_BASE_URL (e.g. Ollama's
http://127.0.0.1:11434/v1), OPENAI_API_KEY and CHAT_MODEL (default gpt-4o-mini). SPEECHD_URL
names speechd (default http://127.0.0.1:8000) and SPEECHD_API_KEY its key, if it has one.
"""

import asyncio
import os
import sys
from pathlib import Path

from openai import AsyncOpenAI

from speechd_client import AsyncClient


async def main(prompt: str, out: str) -> None:
    llm = AsyncOpenAI(api_key=os.environ.get("OPENAI_API_KEY") or "unused")
    async with AsyncClient() as speechd:
        cast = await speechd.live_cast(voice="af_heart", response_format="mp3")
        print(f"listen live: {cast.url}", file=sys.stderr)

        async def save() -> None:  # the audio, as it is made, from the cast's start
            chunks = []
            async with speechd.follow(cast.id) as audio:
                async for data in audio:
                    chunks.append(data)  # or play it: it is one file of the format, growing
            await asyncio.to_thread(Path(out).write_bytes, b"".join(chunks))

        saving = asyncio.create_task(save())
        async with cast:  # leaving the block tells speechd the text is complete
            reply = await llm.chat.completions.create(
                model=os.environ.get("CHAT_MODEL", "gpt-4o-mini"),
                messages=[{"role": "user", "content": prompt}],
                stream=True,
            )
            async for chunk in reply:
                if chunk.choices and chunk.choices[0].delta.content:
                    await cast.append(chunk.choices[0].delta.content)  # spaces and all
        await saving
    print(f"wrote {out}; replay: {cast.url}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "reply.mp3"))
