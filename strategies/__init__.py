"""Trading strategies: the protocol, built-in rules, GP-evolved rules and their selection.

base.py holds the protocol every strategy meets, sma_cross.py a moving-average rule,
gp/ the evolved rules, selection.py the least-correlated subset of strategies.
"""
