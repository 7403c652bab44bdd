; Calls of a plain function name: the callee identifier and its argument list.
(call_expression
  function: (identifier) @callee
  arguments: (argument_list) @args) @call
