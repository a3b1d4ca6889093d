// The APNs simulator: a TLS HTTP/2 and legacy binary server that behaves like Apple's.
