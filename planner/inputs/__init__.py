"""What users give us: model presets and files, HF config import, clusters, expert loads."""
