"""tests/unit/: one folder per library wing. This conftest puts tests/unit on sys.path (pytest's default
import mode adds a conftest's folder), so every wing's tests can import the shared helpers beside it
(image_tables.py); tests/conftest.py's fixtures apply here too."""
