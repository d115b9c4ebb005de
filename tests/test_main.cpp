// Catch2 main for unit_tests. MPI is initialised (a singleton, as for a plain `trainer` run): run_train always makes a
// communicator, an MPI one over this one rank for strategy "none".
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "dist/bootstrap.h"

int main(int argc, char** argv) {
  trainer::MpiSession mpi(&argc, &argv);  // MPI_Finalize on scope exit
  return Catch::Session().run(argc, argv);
}
