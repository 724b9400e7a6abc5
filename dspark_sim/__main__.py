"""`python -m dspark_sim` runs the CLI."""
import sys

from .cli import main

sys.exit(main())
