"""The pure model: calls and their rules, the per-object state machine, objects, kinds,
configuration and errors.

No actors, no futures, no client: every function here is a rule over values (the clock and
randomness are inputs). The layers above (runtime, engine, facade) may import it; it imports
none of them (``.importlinter``).
"""
