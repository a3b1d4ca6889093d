print("apns-bench: not written yet")
