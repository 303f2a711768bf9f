package petstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/petstore-existing/api"
)

// Server implements the API's strict server on a pool.
type Server struct {
	Pool *pgxpool.Pool
}

var _ api.StrictServerInterface = (*Server)(nil)

func (s *Server) FindPets(ctx context.Context, request api.FindPetsRequestObject) (api.FindPetsResponseObject, error) {
	pets, err := FindPets(ctx, s.Pool, request.Params.Tags, request.Params.Limit)
	if err != nil {
		return nil, err
	}
	return api.FindPets200JSONResponse(pets), nil
}

func (s *Server) AddPet(ctx context.Context, request api.AddPetRequestObject) (api.AddPetResponseObject, error) {
	pet, err := AddPet(ctx, s.Pool, *request.Body)
	if err != nil {
		return nil, err
	}
	return api.AddPet200JSONResponse(pet), nil
}

func (s *Server) FindPetByID(ctx context.Context, request api.FindPetByIDRequestObject) (api.FindPetByIDResponseObject, error) {
	pet, err := FindPetByID(ctx, s.Pool, request.Id)
	if errors.Is(err, ErrNotFound) {
		return api.FindPetByIDdefaultJSONResponse{StatusCode: http.StatusNotFound, Body: notFound(request.Id)}, nil
	}
	if err != nil {
		return nil, err
	}
	return api.FindPetByID200JSONResponse(pet), nil
}

func (s *Server) DeletePet(ctx context.Context, request api.DeletePetRequestObject) (api.DeletePetResponseObject, error) {
	err := DeletePet(ctx, s.Pool, request.Id)
	if errors.Is(err, ErrNotFound) {
		return api.DeletePetdefaultJSONResponse{StatusCode: http.StatusNotFound, Body: notFound(request.Id)}, nil
	}
	if err != nil {
		return nil, err
	}
	return api.DeletePet204Response{}, nil
}

func notFound(id int64) api.Error {
	return api.Error{Code: http.StatusNotFound, Message: fmt.Sprintf("Could not find pet with ID %d", id)}
}
