// Package api is kurmad's HTTP/JSON API on a root-only unix socket: the
// wire types, the Backend interface the daemon implements, the Server that
// serves it (Server, Listen) and the Client kurmactl uses.
//
// Errors are JSON objects {"error": "<message>", "code": "<code>"}; the
// codes and their HTTP statuses are listed with the Code constants. Request
// bodies are capped (MaxBodySize) and strictly decoded: exactly one
// JSON object, no unknown fields, every field of the right type.
package api
