#pragma once
// Empty host stand-in: the layout algebra needs nothing from this CUDA header.
