package intake

// The problems of a request's edges: its framing, its headers and its path,
// refused before any handler looks at what it asks for (the body's
// representation and a body not read are package problem's, which the
// admin routes share).
var probAuthorization = problemType{Slug: "multiple-authorization", Title: "The request has more than one Authorization header"}
