"""Answer feedback: the durable records (`records`) and how an answer was made (`why`).
The HTTP routes over them live with the server (`footnote.server.feedback_routes`)."""
