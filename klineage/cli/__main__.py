"""python -m klineage.cli ..."""
from klineage.cli import main

main()
