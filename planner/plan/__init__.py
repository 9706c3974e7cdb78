"""The Plan artifact: one document for every plan family, its file format, rank table and validator."""
