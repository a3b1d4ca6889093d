print("apns-relay")
