print("kafka-bench")
