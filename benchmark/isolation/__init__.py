"""Trust domains in separate processes: the sandbox, the wire format between domains, and the untrusted method and client processes."""  # noqa: E501
