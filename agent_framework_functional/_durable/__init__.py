"""The durable backends: SQLite, Redis and PostgreSQL continuation stores, session stores and checkpoint storages.

Each backend's public class is re-exported by the package (``agent_framework_functional``); the modules here
and their helpers (clients, schema, step-cache deltas, sealing) are private.
"""
