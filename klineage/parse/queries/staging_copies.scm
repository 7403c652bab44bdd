; A store into an element of an array named by an identifier: `s[i] = value;` (the copy half of a
; shared-memory staging).
(expression_statement
  (assignment_expression
    left: (subscript_expression
      argument: (identifier) @dst
      indices: (subscript_argument_list) @dst_index)
    operator: "="
    right: (_) @src) @assign) @stmt
