print("domain-bench: not written yet")
