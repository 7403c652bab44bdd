#pragma once
// __pipeline_memcpy_async, __pipeline_commit and __pipeline_wait_prior are declared in klineage_cuda_prelude.h
