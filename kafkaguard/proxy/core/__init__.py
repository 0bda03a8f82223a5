"""The sans-I/O core of one client connection: the exchange (``exchange.py``), the commands it
returns (``commands.py``), the handler context (``context.py``), connection limits as clocked
state machines (``limits.py``) and per-listener counters (``stats.py``). No asyncio, socket,
ssl or selectors (docs/design.md#layers)."""
