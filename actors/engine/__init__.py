"""The engine: the object actors and their registry, the executor and its sender, call groups
and holds, the messages between them, metrics and asyncio bridges. Built on the runtime, driven
by the model's rules, used by the facades.
"""
