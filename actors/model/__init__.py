"""The pure model: calls and their rules, the per-object state machine, objects, kinds,
configuration and errors. No actors, no futures, no client: the clock and randomness are
inputs. It imports no other layer (``.importlinter``).
"""
