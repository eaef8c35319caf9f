"""The durable backends: SQLite, Redis and PostgreSQL continuation stores, session stores and checkpoint storages.

The package re-exports each backend's public class; the modules here and their helpers are private.
"""
