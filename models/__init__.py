"""The safeprefetch catalog: broken models and reference designs, one per module.

Installed as ``safeprefetch.models``; ``python -m safeprefetch list`` prints them.
"""
