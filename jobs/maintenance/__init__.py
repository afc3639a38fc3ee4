"""Work done on a timer by whichever worker is due: recovery (reaper), pruning, queue samples.

These modules may import the rules, the reads and the root; the runtime calls
them, never the reverse.
"""
