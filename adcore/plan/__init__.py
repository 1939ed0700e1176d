"""The plan between analysis and generation: what the reverse pass keeps or recomputes
(the minimum cut), scratch arrays snapshotted or refilled, loop order, and its report."""
