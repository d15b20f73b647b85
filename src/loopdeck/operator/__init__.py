"""What wires a run to its operator: launching it, the view folded from its events, the
transcript, the approval queue, and the links a console reaches a run through. No Textual."""
