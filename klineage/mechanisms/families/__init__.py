"""The mechanism families, one module or package each (klineage.mechanisms.registry discovers them);
modules whose name starts with `_` hold what several families share."""
