// The APNs wire module: notification model, JWT, HTTP/2 and binary connections, supervisor.
