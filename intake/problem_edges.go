package intake

// The problems of a request's edges: its framing, its headers and its path,
// refused before any handler looks at what it asks for.
var (
	probRequestTimeout  = problemType{"request-timeout", "The request did not arrive in time"}
	probContentEncoding = problemType{"unsupported-content-encoding", "The request body must not be compressed"}
	probAuthorization   = problemType{"multiple-authorization", "The request has more than one Authorization header"}
)
