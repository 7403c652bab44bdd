; Warp shuffles that reductions are built from: butterfly (xor) and tree (down) exchanges.
(call_expression
  function: (identifier) @callee
  arguments: (argument_list) @args
  (#match? @callee "^__shfl_(xor|down)_sync$")) @call
